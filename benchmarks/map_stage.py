"""Where the map stage of a `store` micro-batch spends its time, step by step, on one core.

    .venv/bin/python benchmarks/map_stage.py [INPUT] [--repeat 2]

Without INPUT, generates one hour of the `throughput.py` default input (172k events, 5
files). A one-core Spark (`local[1]`) runs, warm, best of `--repeat` rounds, each a job
that adds one step of the engine's map stage to the previous one:

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
  after the marks' pass of their own.

Prints each step's lines/s and the time it adds per 100k lines, with the load average.
"""

from __future__ import annotations

import argparse
import os
import time

PARTITIONS = 4
MAX_FUTURE_US = 86_400_000_000


def _load() -> str:
    return " ".join(f"{x:.1f}" for x in os.getloadavg())


def steps(spark, root: str) -> dict:
    from sessionize.engines.batch_marks import mark_keys, with_marks
    from sessionize.engines.placement import partition_users
    from sessionize.parsing import parse, parse_exact
    from sessionize.schema import layout
    from sessionize.sources.files import file_batch

    now_us = int(time.time() * 1_000_000)
    valid = "reason IS NULL"  # so that the whole parse runs, not only what a count needs
    keys = mark_keys(spark, PARTITIONS, layout().user_type)

    def parsed(marks=None):
        return parse(file_batch(spark, [root]), now=now_us, max_future_us=MAX_FUTURE_US,
                     valid_sources=False, marks=marks)  # fmt: skip

    return {
        "read": lambda: file_batch(spark, [root]).count(),
        "parse (exact)": lambda: parse_exact(file_batch(spark, [root])).where(valid).count(),
        "parse": lambda: parsed().where(valid).count(),
        "marks (own pass)": lambda: with_marks(parsed(), keys).count(),
        "marks": lambda: parsed(keys).count(),
        "shuffle write": lambda: partition_users(parsed(keys), PARTITIONS).count(),
        "shuffle write (own pass)": lambda: partition_users(with_marks(parsed(), keys),
                                                            PARTITIONS).count(),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("input", nargs="?")
    ap.add_argument("--repeat", type=int, default=2)
    args = ap.parse_args()
    from parse_speed import default_input, spark_session

    root = args.input or default_input("map-stage-")
    spark = spark_session()
    jobs = steps(spark, root)
    lines = jobs["read"]()
    for job in jobs.values():  # warm up
        job()
    best = dict.fromkeys(jobs, float("inf"))
    for _ in range(args.repeat):
        for name, job in jobs.items():
            t0 = time.perf_counter()
            job()
            best[name] = min(best[name], time.perf_counter() - t0)
            print(f"  {name}: {time.perf_counter() - t0:.2f} s (load {_load()})", flush=True)
    print(f"{lines:,} lines, local[1], best of {args.repeat}")
    previous = {"parse (exact)": "read", "parse": "read", "marks (own pass)": "parse",
                "marks": "parse", "shuffle write": "marks",
                "shuffle write (own pass)": "marks (own pass)"}  # fmt: skip
    for name, seconds in best.items():
        added = seconds - best[previous[name]] if name in previous else seconds
        print(f"{name:<26}{lines / seconds:>10,.0f} lines/s  "
              f"+{added * 1e5 / lines:.2f} s per 100k lines")  # fmt: skip


if __name__ == "__main__":
    main()
