"""Where the map stage of a `store` micro-batch spends its time, step by step, on one core.

    .venv/bin/python benchmarks/map_stage.py [INPUT] [--repeat 2] [--events 172000]

Without INPUT, generates one hour of the `throughput.py` default input (172k events, 5
files; `--events` fewer on a busy machine). A one-core Spark (`local[1]`) runs, warm, best
of `--repeat` rounds, each a job that adds one step of the engine's map stage to the
previous one:

- `read`: the file source (listing, the lines decoded in a Python task), counted;
- `parse (exact)`: plus `parsing.parse_exact`, Spark's expressions (the parse before the
  block reader), counted;
- `parse`: instead, plus `parsing.parse` as the `store` engine calls it (the block reader in
  the reading task, the batch's time judged there, valid events' sources left behind);
- `marks (own pass)`: plus the batch marks in a pass of their own
  (`engines.batch_marks.with_marks`, a second Python task: how the engine marked the rows
  before the reading task made the marks, and still marks typed rows);
- `marks`: instead, `parse` with the marks made by the reading task (`marks=`), as the
  engine calls it;
- `shuffle write`: plus the repartition by user into 4 partitions (the map side's shuffle
  write; the partition tasks only count their rows); `shuffle write (own pass)` the same
  after the marks' pass of their own;
- `marks (one task)` and `shuffle write (one task)`: `marks` and `shuffle write` with the
  files decoded by the parse's own task (`parse` with `decode`, the listing of the files
  as its input), as the engines read a file tree: one Python task from a file's path to
  typed rows and marks, rather than the file source's task and the parse's. Their ratios
  to the two-task steps are printed last.

Prints each step's lines/s and the time it adds per 100k lines, with the load average; each
round's CPU time too (Spark's JVM and Python workers), which a busy machine disturbs less
than the wall time.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

from bench_common import descendants, process_stats

PARTITIONS = 4
MAX_FUTURE_US = 86_400_000_000


def _load() -> str:
    return " ".join(f"{x:.1f}" for x in os.getloadavg())


def _cpu_seconds() -> float:
    """CPU time of this process and all its descendants (Spark's JVM, its Python workers),
    those that ended included (reaped into their parent's children times): what a job
    costs in CPU, less sensitive than wall time to other work on the machine (Linux)."""
    stats = process_stats()
    tree = [os.getpid(), *descendants(os.getpid(), stats)]
    ticks = sum(sum(int(x) for x in stats[pid][11:15]) for pid in tree if pid in stats)
    return ticks / os.sysconf("SC_CLK_TCK")


def steps(spark, root: str) -> dict:
    from sessionize.engines.batch_marks import mark_keys, with_marks
    from sessionize.engines.placement import partition_users
    from sessionize.parsing import parse, parse_exact
    from sessionize.schema import layout
    from sessionize.sources.files import decode_listed, file_batch, listed_files

    now_us = int(time.time() * 1_000_000)
    valid = "reason IS NULL"  # so that the whole parse runs, not only what a count needs
    keys = mark_keys(PARTITIONS, layout().user_type)

    def parsed(marks=None):
        return parse(
            file_batch(spark, [root]),
            now=now_us,
            max_future_us=MAX_FUTURE_US,
            valid_sources=False,
            marks=marks,
        )

    def one_task():
        return parse(
            listed_files(spark, [root]),
            now=now_us,
            max_future_us=MAX_FUTURE_US,
            valid_sources=False,
            marks=keys,
            decode=decode_listed,
        )

    return {
        "read": lambda: file_batch(spark, [root]).count(),
        "parse (exact)": lambda: parse_exact(file_batch(spark, [root])).where(valid).count(),
        "parse": lambda: parsed().where(valid).count(),
        "marks (own pass)": lambda: with_marks(parsed(), keys).count(),
        "marks": lambda: parsed(keys).count(),
        "shuffle write": lambda: partition_users(parsed(keys), PARTITIONS).count(),
        "shuffle write (own pass)": lambda: partition_users(
            with_marks(parsed(), keys), PARTITIONS
        ).count(),
        "marks (one task)": lambda: one_task().count(),
        "shuffle write (one task)": lambda: partition_users(one_task(), PARTITIONS).count(),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("input", nargs="?")
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--events", type=int, default=172_000, help="generated input's events")
    ap.add_argument("--steps", help="comma-separated steps to run (default: all)")
    args = ap.parse_args()
    from parse_speed import default_input, spark_session

    root = args.input or default_input("map-stage-", args.events)
    spark = spark_session()
    jobs = steps(spark, root)
    lines = jobs["read"]()
    if args.steps:
        chosen = args.steps.split(",")
        jobs = {name: job for name, job in jobs.items() if name in chosen}
    for job in jobs.values():  # warm up
        job()
    rounds: dict[str, list[float]] = {name: [] for name in jobs}
    cpu: dict[str, list[float]] = {name: [] for name in jobs}
    for _ in range(args.repeat):
        for name, job in jobs.items():
            c0, t0 = _cpu_seconds(), time.perf_counter()
            job()
            rounds[name].append(time.perf_counter() - t0)
            cpu[name].append(_cpu_seconds() - c0)
            print(
                f"  {name}: {rounds[name][-1]:.2f} s, {cpu[name][-1]:.2f} s of CPU "
                f"(load {_load()})",
                flush=True,
            )
    best = {name: min(times) for name, times in rounds.items()}
    print(f"{lines:,} lines, local[1], best of {args.repeat}")
    previous = {
        "parse (exact)": "read",
        "parse": "read",
        "marks (own pass)": "parse",
        "marks": "parse",
        "shuffle write": "marks",
        "shuffle write (own pass)": "marks (own pass)",
    }
    for name, seconds in best.items():
        before = previous.get(name)
        added = seconds - best[before] if before in best else seconds
        print(
            f"{name:<26}{lines / seconds:>10,.0f} lines/s  "
            f"+{added * 1e5 / lines:.2f} s per 100k lines"
        )
    for step in ("marks", "shuffle write"):
        if step not in best or f"{step} (one task)" not in best:
            continue
        one = f"{step} (one task)"
        ratio = best[step] / best[one]
        median = statistics.median(rounds[step]) / statistics.median(rounds[one])
        cpu_ratio = statistics.median(cpu[step]) / statistics.median(cpu[one])
        print(
            f"{step}, one task / two tasks: {ratio:.2f}x the lines per second "
            f"(best of each), {median:.2f}x (median of each), {cpu_ratio:.2f}x the lines "
            "per CPU second (median of each)"
        )


if __name__ == "__main__":
    main()
