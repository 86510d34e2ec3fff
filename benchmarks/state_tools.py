"""Time of `sessionize state migrate` and `repartition` per million open users.

    .venv/bin/python benchmarks/state_tools.py [--users 100000] [--rows 3] [--partitions 4]
        [--pairs files:files files:postgres ...] [--repartition 8]

Builds a state of `--users` open users (`--rows` events each) in `--partitions` partitions
of each source backend, then times the copy of its last version into a fresh target (read
every partition, write, read back and verify, write the job record) for each pair, and a
repartition into `--repartition` partitions (users rehashed by Spark, as the engine places
them) for the first pair. Prints seconds and seconds per million users (linear in users:
every step is one pass over the rows).
"""

from __future__ import annotations

import argparse
import functools
import time

import numpy as np

from benchmarks.state_backends import make_backends, state_rows
from sessionize.commands.statetools.copy import copy_state
from sessionize.config import SessionRules
from sessionize.engines.placement import user_partitions

JOB = "bench"
VERSION = 1
AT = 1_700_000_000_000_000


def build(backend, users: int, rows: int, partitions: int) -> None:
    rng = np.random.default_rng(7)
    keys = np.arange(1, users + 1, dtype=np.int64)
    for p in range(partitions):
        with backend.open(JOB, p, -1) as tx:
            tx.put_many(state_rows(keys[keys % partitions == p], rows, AT, rng))
            tx.commit(VERSION, {})
    settings = {
        "gap": "10m",
        "lateness": "10m",
        "close_actions": "browser_close",
        "partitions": partitions,
    }
    backend.write_job_settings(JOB, settings)
    backend.write_job_record(JOB, VERSION, {"version": VERSION})


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--users", type=int, default=100_000)
    ap.add_argument("--rows", type=int, default=3)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--pairs", nargs="+", default=["files:files", "files:postgres"])
    ap.add_argument("--repartition", type=int, default=8)
    args = ap.parse_args()
    rules = SessionRules()
    sources: dict[str, object] = {}
    cleanups = []
    spark = None
    for i, pair in enumerate(args.pairs):
        src, dst = pair.split(":")
        if src not in sources:
            made = make_backends([src])[src]
            cleanups.append(made[1])
            sources[src] = made[0](False)
            t0 = time.perf_counter()
            build(sources[src], args.users, args.rows, args.partitions)
            print(f"built {args.users:,} users in {src}: {time.perf_counter() - t0:.1f}s")
        runs = [("migrate", args.partitions, None)]
        if i == 0 and args.repartition:
            from pyspark.sql import SparkSession

            spark = spark or SparkSession.builder.master("local[2]").getOrCreate()
            spark.sparkContext.setLogLevel("ERROR")
            assign = functools.partial(user_partitions, spark)
            runs.append(
                (f"repartition {args.partitions}->{args.repartition}", args.repartition, assign)
            )
        for label, count, assign in runs:
            make, clean = make_backends([dst])[dst]
            cleanups.append(clean)
            result = copy_state(
                sources[src],
                make(False),
                JOB,
                VERSION,
                partitions_in=args.partitions,
                partitions_out=count,
                rules=rules,
                assign=assign,
                on_line=lambda _: None,
            )
            per_million = result.seconds * 1e6 / args.users
            print(
                f"{label} {src} -> {dst}: {result.seconds:.1f}s for {result.users:,} users, "
                f"{per_million:.0f}s per million"
            )
    for clean in cleanups:
        clean()


if __name__ == "__main__":
    main()
