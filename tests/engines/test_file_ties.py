"""Files of a stream with equal modification times (written within one millisecond) are
read in path order: Spark lists an hour-laid tree through the glob of its hour folders,
whose results are sorted, where a directory's listing has no order. When a tie still
reorders files (names in another order than they were written), the late warning says so."""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime, timedelta

from sessionize.commands.stream import StreamOptions, run_stream

H0 = datetime(2026, 11, 1, tzinfo=UTC)
FILES = 8


def _write(root, names) -> None:
    """File k holds every user's events of minutes 10k..10k+9; all share one mtime."""
    d = root / "event_date=2026-11-01" / "event_hour=00"
    d.mkdir(parents=True)
    for k, name in enumerate(names):
        lines = [
            json.dumps(
                {
                    "user_id": u,
                    "page": {"current": "p"},
                    "event_time": (H0 + timedelta(minutes=10 * k + m)).isoformat(),
                }
            )
            for m in range(0, 10, 3)
            for u in range(3)
        ]
        (d / name).write_text("\n".join(lines) + "\n")
    for name in names:
        os.utime(d / name, (1_800_000_000, 1_800_000_000))


def _run(spark, root, lines):
    opts = StreamOptions(
        input=str(root / "in"),
        output=str(root / "out"),
        checkpoint=str(root / "chk"),
        partitions=2,
        max_files_per_trigger=1,
    )
    return run_stream(opts, spark, on_batch=lines.append)


def test_files_with_one_modification_time_are_read_in_path_order(spark, tmp_path):
    _write(tmp_path / "in", [f"part-{k:05d}.json" for k in range(FILES)])
    (tmp_path / "in" / "stray.json").write_text("{}\n")  # outside the hour folders
    lines: list[str] = []
    records = _run(spark, tmp_path, lines)
    assert sum(r["batch"]["late"] for r in records) == 0, lines
    assert len(records) == FILES
    assert lines[0].startswith("note: 1 file of ") and lines[0].endswith("stray.json")
    assert "outside its hour folders (event_date=D/event_hour=H/) are not read" in lines[0]


def test_a_tie_that_still_reorders_files_is_named_in_the_warning(spark, tmp_path):
    """Names in the reverse of the order written: read in path order, the later events
    come first and the others are late; the warning names the tie, not `cp -r`."""
    _write(tmp_path / "in", [f"part-{FILES - k:05d}.json" for k in range(FILES)])
    lines: list[str] = []
    _run(spark, tmp_path, lines)
    late = [line for line in lines if line.startswith("warning:") and "late_events" in line]
    assert late and all(
        "share their modification time with files of an earlier batch" in line
        and "cp -r" not in line
        for line in late
    ), late
