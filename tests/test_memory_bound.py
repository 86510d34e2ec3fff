"""A task holds a bounded amount of data whatever the file size (docs/design.md, "Events";
docs/operations.md, a map task's memory): a 1 GiB file of long lines goes through the file
source and the block reader while the peak resident memory of every Python worker stays
far below the file's size.

The lines are valid events padded with whitespace inside the object (1 MiB each, so the
file has few lines and the block reader parses every byte). Peak memory is each worker's
VmHWM (/proc), reset before the job (`clear_refs`), over the Python processes that our
Spark JVM started, not other programs on the machine."""

from __future__ import annotations

import json
import os
from pathlib import Path

from sessionize.parsing import parse
from sessionize.sources.files import decode_listed, listed_files
from sessionize.spark_session import ARROW_BATCH_BYTES

GIB = 1 << 30
LINE = 1 << 20
NOW_US = 1_793_527_200_000_000  # 2026-11-01T10:00:00Z
BATCH_BYTES = "spark.sql.execution.arrow.maxBytesPerBatch"
# What one worker may hold: a batch of at most ARROW_BATCH_BYTES of lines in a few copies
# (the parse) and a 16 MiB chunk of the file (the file source, decoded by the same task),
# plus the interpreter and its libraries. Holding the file would need over 1 GiB.
BOUND = 512 << 20


def _write(path: Path) -> int:
    """A 1 GiB file of 1 MiB lines, each a valid event; returns its number of lines."""
    lines = GIB // LINE
    with path.open("wb") as f:
        for i in range(lines):
            event = {"user_id": i, "event_time": "2026-11-01T09:00:00Z", "page": {"current": "a"}}
            text = json.dumps(event)[:-1].encode()
            f.write(text + b" " * (LINE - len(text) - 2) + b"}\n")
    return lines


def _descendants(root: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        parent = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(parent, []).append(int(entry))
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo.extend(children.get(pid, []))
    return out


def _python_workers(spark) -> list[int]:
    """Our Spark JVM's Python processes (the daemon and the workers it forks)."""
    jvm = spark.sparkContext._gateway.proc.pid
    pids = []
    for pid in _descendants(jvm):
        try:
            if b"pyspark.daemon" in Path(f"/proc/{pid}/cmdline").read_bytes():  # not the JVM
                pids.append(pid)
        except OSError:
            continue
    return pids


def _peak_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    return 0


def test_a_1_gib_file_is_read_with_bounded_memory_per_worker(spark, tmp_path):
    path = tmp_path / "event_date=2026-11-01" / "event_hour=09" / "big.json"
    path.parent.mkdir(parents=True)
    spark.conf.set(BATCH_BYTES, str(ARROW_BATCH_BYTES))  # as the CLI's session sets it
    try:
        lines = _write(path)
        assert path.stat().st_size == GIB
        for pid in _python_workers(spark):
            Path(f"/proc/{pid}/clear_refs").write_text("5")  # VmHWM := current RSS
        parsed = parse(
            listed_files(spark, [str(tmp_path)]),
            now=NOW_US,
            max_future_us=86_400_000_000,
            valid_sources=False,
            decode=decode_listed,
        )
        assert parsed.where("reason IS NULL").count() == lines
        peaks = [_peak_bytes(pid) for pid in _python_workers(spark)]
    finally:
        path.unlink(missing_ok=True)
        spark.conf.unset(BATCH_BYTES)
    assert peaks
    assert max(peaks) < BOUND, f"a Python worker held {max(peaks) >> 20} MiB"
