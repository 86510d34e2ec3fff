"""What the benchmark scripts share: the generated input and the fresh-process runner."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sessionize.generate.writer import GeneratorConfig, write_files


def add_input_args(ap: argparse.ArgumentParser) -> None:
    """The size of the generated input: users, hours, events per hour."""
    ap.add_argument("--users", type=int, default=20000)
    ap.add_argument("--hours", type=int, default=5)
    ap.add_argument("--events-per-hour", type=int, default=100_000)
    ap.add_argument("--files-per-hour", type=int, default=2)


def add_run_args(ap: argparse.ArgumentParser, partitions: int = 4) -> None:
    """State partitions, and the internal flags of a contender's fresh process."""
    ap.add_argument("--partitions", type=int, default=partitions, help="state partitions")
    ap.add_argument("--run", help=argparse.SUPPRESS)  # internal: one contender, this process
    ap.add_argument("--input", help=argparse.SUPPRESS)
    ap.add_argument("--work", help=argparse.SUPPRESS)


def warm_spark(name: str, partitions: int, spark_jit: bool = False):
    """A session whose JVM and Python workers are up, so that no clock counts their start.
    With `spark_jit`, the driver JVM compiles with the JVM's default thresholds rather
    than sessionize's (`spark_session.JIT_OPTIONS`); it maps the class archive either way."""
    from sessionize import jvm_archive, spark_session

    jvm_default = f"{spark_session.LOG4J_OPTION} {jvm_archive.java_options()}".strip()
    conf = {"spark.driver.extraJavaOptions": jvm_default} if spark_jit else {}
    spark = spark_session.get_spark(f"bench-{name}", shuffle_partitions=partitions, conf=conf)
    spark.range(1).count()
    return spark


@contextmanager
def bench_root(prefix: str = "sessionize-bench-") -> Iterator[Path]:
    """A scratch directory for the input and the contenders' work, removed at the end."""
    root = Path(tempfile.mkdtemp(prefix=prefix))
    try:
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


def input_config(args: argparse.Namespace) -> GeneratorConfig:
    """A realistic mix: 1% duplicates, 0.1% invalid lines, 5% explicit closes."""
    return GeneratorConfig(
        start=datetime(2026, 11, 1, tzinfo=UTC),
        hours=args.hours,
        users=args.users,
        events_per_hour=args.events_per_hour,
        seed=1,
        duplicate_rate=0.01,
        invalid_rate=0.001,
        close_rate=0.05,
        files_per_hour=getattr(args, "files_per_hour", 2),
    )


def write_input(cfg: GeneratorConfig, path: str) -> None:
    t0 = time.perf_counter()
    summary = write_files(cfg, path)
    print(f"input: {summary} ({time.perf_counter() - t0:.1f}s to generate)", flush=True)


def run_fresh(
    script: str, name: str, inp: str, work: str, partitions: int, extra: list[str] | None = None
) -> dict[str, Any]:
    """Run one contender of `script` in a new process (no JVM or cache carries over)."""
    env = dict(os.environ)
    env.setdefault("SESSIONIZE_SPARK_MASTER", "local[2]")
    out = subprocess.run(
        [
            sys.executable,
            script,
            "--run",
            name,
            "--input",
            inp,
            "--work",
            work,
            "--partitions",
            str(partitions),
            *(extra or []),
        ],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    if out.returncode != 0:
        raise SystemExit(f"{name} failed:\n{out.stderr[-4000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def process_stats() -> dict[int, list[str]]:
    """Every live process's `/proc/PID/stat` fields after its command name (Linux): index 1
    is the parent's pid, 11-14 the CPU ticks (utime, stime, cutime, cstime)."""
    stats = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stats[int(entry)] = f.read().rsplit(")", 1)[1].split()
        except OSError:  # it ended while the directory was read
            continue
    return stats


def children(pid: int, stats: dict[int, list[str]] | None = None) -> list[int]:
    """The live children of `pid`."""
    stats = process_stats() if stats is None else stats
    return [child for child, fields in stats.items() if int(fields[1]) == pid]


def descendants(pid: int, stats: dict[int, list[str]] | None = None) -> list[int]:
    """The live descendants of `pid`, from one reading of `/proc`."""
    stats = process_stats() if stats is None else stats
    out, todo = [], [pid]
    while todo:
        kids = children(todo.pop(), stats)
        out += kids
        todo += kids
    return out


def write_json(path: str, benchmark: str, results: list[dict]) -> None:
    """The results as `{"benchmark", "load", "results"}`, the input of benchmarks/plot.py."""
    doc = {"benchmark": benchmark, "load": list(os.getloadavg()), "results": results}
    Path(path).write_text(json.dumps(doc, indent=1, default=str) + "\n")


def alternate_batch_jobs(
    spark, root: Path, hours: int, jobs: dict[str, dict[str, Any]], repeats: int, after=None
) -> tuple[dict[str, list[float]], dict[str, list[float]], int]:
    """`sessionize batch` over `root/in`'s first `hours` hours once per job per round, the
    jobs alternating so that the machine's load falls on each alike; `jobs` maps a name to
    the `BatchOptions` fields that differ. `after(name, out, wall_s, cpu_s)` sees each run's
    output before it is removed. Returns (wall s, CPU s per job, lines per run)."""
    from sessionize.commands.batch import BatchOptions, run_batch

    first = datetime(2026, 11, 1, tzinfo=UTC)
    last = datetime(2026, 11, 1, hours - 1, tzinfo=UTC)
    wall: dict[str, list[float]] = {name: [] for name in jobs}
    cpu: dict[str, list[float]] = {name: [] for name in jobs}
    lines = 0
    for i in range(repeats):
        for name, fields in jobs.items():
            out = root / f"out-{i}-{name.split()[0]}"
            opts = BatchOptions(
                input=str(root / "in"),
                output=str(out),
                start=first,
                end=last,
                partitions=2,
                **fields,
            )
            t0, c0 = time.perf_counter(), tree_cpu_seconds()
            records = run_batch(opts, spark, lambda _: None)
            wall[name].append(time.perf_counter() - t0)
            cpu[name].append(tree_cpu_seconds() - c0)
            lines = sum(r["batch"]["records"] for r in records)
            if after is not None:
                after(name, out, wall[name][-1], cpu[name][-1])
            shutil.rmtree(out, ignore_errors=True)
    return wall, cpu, lines


def tree_cpu_seconds() -> float:
    """CPU seconds used so far by this process and every process below it (the Spark JVM,
    the Python workers; exited ones through their parents' counts), from /proc: on a shared
    machine a job's CPU time moves far less with the others' load than its wall time."""
    parent, times = {}, {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        parent[int(entry)] = int(fields[1])
        times[int(entry)] = sum(int(x) for x in fields[11:15])  # utime stime cutime cstime
    mine, todo = set(), [os.getpid()]
    while todo:
        pid = todo.pop()
        mine.add(pid)
        todo += [p for p, pp in parent.items() if pp == pid and p not in mine]
    return sum(times.get(p, 0) for p in mine) / os.sysconf("SC_CLK_TCK")
