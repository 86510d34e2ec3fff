"""Helpers for end-to-end tests: generate input, run the CLI as a real process, read outputs."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import pyarrow as pa
import pyarrow.dataset as ds

from sessionize.commands.stream import StreamOptions, run_stream
from sessionize.generate.writer import GeneratorConfig, write_files

OUTPUTS = ("sessions", "page_views", "late_events", "invalid_events")
SORT_KEYS = {
    "sessions": ["user_id", "start_time"],
    "page_views": ["user_id", "event_time", "page"],
    "events": ["user_id", "event_time", "page"],
    "late_events": ["user_id", "event_time", "page", "action"],
    "invalid_events": ["source", "raw", "reason"],
    "identities": ["anonymous_id", "last_seen"],
    "users": ["stitched_user_id"],
}


def generate(path: Path, **overrides) -> Path:
    cfg = dict(
        start=datetime(2026, 11, 1, tzinfo=UTC),
        hours=3,
        users=300,
        events_per_hour=3000,
        seed=11,
        duplicate_rate=0.02,
        late_rate=0.0,
        invalid_rate=0.002,
        close_rate=0.1,
        files_per_hour=2,
    )
    cfg.update(overrides)
    write_files(GeneratorConfig(**cfg), str(path))
    return path


def read_output(root: Path, name: str, *, with_batch: bool = True) -> pa.Table:
    """One output as committed readers see it, in a canonical row order."""
    path = root / name
    if not path.exists():
        return pa.table({})
    table = ds.dataset(str(path), format="parquet", partitioning="hive").to_table()
    if not with_batch and "batch_id" in table.column_names:
        table = table.drop_columns(["batch_id"])
    keys = [k for k in SORT_KEYS[name] if k in table.column_names]
    if with_batch and "batch_id" in table.column_names:
        keys = ["batch_id", *keys]
    return table.sort_by([(k, "ascending") for k in keys])


# A CLI process's JVM lives for seconds to a few minutes over small inputs: the quick
# compiler alone and the serial collector spend about half the CPU of the defaults, whose
# optimizing compiler and parallel collector threads compete for the cores with the tasks.
# The JIT tier and the collector change how fast the JVM runs, never what it computes.
SHORT_JVM_OPTS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"


def cli_env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env.setdefault("SPARK_SUBMIT_OPTS", SHORT_JVM_OPTS)  # the driver's JVM
    env.setdefault("SPARK_LAUNCHER_OPTS", SHORT_JVM_OPTS)  # spark-submit's own
    env.update({"SESSIONIZE_SPARK_MASTER": "local[2]", "PYTHONUNBUFFERED": "1", **extra})
    return env


def sessionize(*args: str, env: dict[str, str] | None = None, timeout: float = 300):
    """Run `python -m sessionize ARGS` to completion."""
    return subprocess.run(
        [sys.executable, "-m", "sessionize", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env or cli_env(),
    )


def start_cli(args: list[str], env: dict[str, str], *, merged: bool = True):
    """The CLI in its own process group; `merged` sends stderr to stdout (pause points in
    Spark tasks print there)."""
    return subprocess.Popen(
        [sys.executable, "-m", "sessionize", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT if merged else subprocess.PIPE,
        text=True,
        env=env,
        start_new_session=True,
    )


def wait_for(proc: subprocess.Popen, marker: str, timeout: float = 300) -> str:
    """Read `proc`'s stdout up to a line holding `marker`; returns what was read. Kills the
    process group and fails if the process ends or `timeout` passes first."""
    seen = []
    deadline = time.monotonic() + timeout
    assert proc.stdout is not None
    for line in proc.stdout:
        seen.append(line)
        if marker in line:
            return "".join(seen)
        if time.monotonic() > deadline:
            break
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    raise AssertionError(f"never saw {marker!r}; output:\n{''.join(seen)[-3000:]}")


def run_until_killed(args: list[str], marker: str, env: dict[str, str], timeout: float = 300):
    """Start the CLI in its own process group, wait for `marker` on stdout, kill -9 it all.

    Returns the stdout seen. Fails if the process ends before printing the marker.
    """
    proc = start_cli(args, env)
    seen = wait_for(proc, marker, timeout)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    return seen


def stream_args(inp: Path, root: Path, output: str | None = None) -> list[str]:
    """`sessionize stream` over `inp` writing under `root` (or to `output`), one file per
    micro-batch."""
    return [
        "stream",
        "--input",
        str(inp),
        "--output",
        output or str(root / "out"),
        "--checkpoint",
        str(root / "chk"),
        "--partitions",
        "3",
        "--max-files-per-trigger",
        "1",
    ]


def clean_stream_run(spark, root: Path) -> Path:
    """Two hours of input under `root/in` and their uninterrupted run in `root/clean` (in
    this process, with the CLI's defaults): what a crashed or contested run must equal."""
    inp = generate(root / "in", hours=2, invalid_rate=0.01, late_rate=0.01)
    clean = StreamOptions(
        input=str(inp),
        output=str(root / "clean" / "out"),
        checkpoint=str(root / "clean" / "chk"),
        partitions=3,
        max_files_per_trigger=1,
    )
    run_stream(clean, spark, on_batch=lambda _: None)
    return inp


def assert_same_as_clean(root: Path, run: Path) -> None:
    for name in OUTPUTS:
        expected = read_output(root / "clean" / "out", name)
        assert read_output(run / "out", name).equals(expected), name
    assert read_output(run / "out", "sessions").num_rows > 0
