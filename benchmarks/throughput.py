"""Throughput of the engines against a stateless read-parse-write of the same input.

    .venv/bin/python benchmarks/throughput.py [--users 20000 --hours 5 --events-per-hour 100000]

Generates the input once, then runs every contender in a fresh process (so no JVM or cache
carries over), timing only the work: from the first read to the last committed write. Prints
events/s per contender and its ratio to the stateless figure, all measured in this run.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

CONTENDERS = ("stateless", "store-files")


def run_contender(name: str, inp: str, work: str, partitions: int) -> dict:
    """Inside the fresh process: run one contender, return its timing."""
    from sessionize.spark import get_spark

    spark = get_spark(f"bench-{name}", shuffle_partitions=partitions)
    spark.range(1).count()  # JVM and Python workers up before the clock starts
    t0 = time.perf_counter()
    if name == "stateless":
        from sessionize.parsing import parse
        from sessionize.sources.files import file_batch

        parse(file_batch(spark, [inp])).write.mode("overwrite").parquet(f"{work}/out")
        events = spark.read.parquet(f"{work}/out").count()
    elif name == "store-files":
        from sessionize.stream import StreamOptions, run_stream

        opts = StreamOptions(
            input=inp, output=f"{work}/out", checkpoint=f"{work}/chk", partitions=partitions
        )
        records = run_stream(opts, spark, on_batch=lambda _: None)
        events = records[-1]["totals"]["records"]
    else:
        raise SystemExit(f"unknown contender {name}")
    return {"name": name, "events": events, "seconds": time.perf_counter() - t0}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--users", type=int, default=20000)
    ap.add_argument("--hours", type=int, default=5)
    ap.add_argument("--events-per-hour", type=int, default=100_000)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--only", nargs="*", default=list(CONTENDERS))
    ap.add_argument("--run", help=argparse.SUPPRESS)  # internal: one contender, this process
    ap.add_argument("--input", help=argparse.SUPPRESS)
    ap.add_argument("--work", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.run:
        print(json.dumps(run_contender(args.run, args.input, args.work, args.partitions)))
        return

    from sessionize.generator import GeneratorConfig, write_files

    root = Path(tempfile.mkdtemp(prefix="sessionize-bench-"))
    try:
        cfg = GeneratorConfig(
            start=datetime(2026, 11, 1, tzinfo=UTC),
            hours=args.hours,
            users=args.users,
            events_per_hour=args.events_per_hour,
            seed=1,
            duplicate_rate=0.01,
            invalid_rate=0.001,
            close_rate=0.05,
            files_per_hour=2,
        )
        t0 = time.perf_counter()
        summary = write_files(cfg, str(root / "input"))
        print(f"input: {summary} ({time.perf_counter() - t0:.1f}s to generate)")
        results = []
        for name in args.only:
            work = root / name
            env = dict(os.environ, SESSIONIZE_SPARK_MASTER=os.environ.get(
                "SESSIONIZE_SPARK_MASTER", "local[2]"))  # fmt: skip
            out = subprocess.run(
                [sys.executable, __file__, "--run", name, "--input", str(root / "input"),
                 "--work", str(work), "--partitions", str(args.partitions)],
                capture_output=True, text=True, env=env, check=False,
            )  # fmt: skip
            if out.returncode != 0:
                raise SystemExit(f"{name} failed:\n{out.stderr[-4000:]}")
            results.append(json.loads(out.stdout.strip().splitlines()[-1]))
            shutil.rmtree(work, ignore_errors=True)
        base = next((r for r in results if r["name"] == "stateless"), None)
        print(f"{'contender':<16}{'events':>12}{'seconds':>10}{'events/s':>12}{'vs stateless':>14}")
        for r in results:
            rate = r["events"] / r["seconds"]
            ratio = rate / (base["events"] / base["seconds"]) if base else float("nan")
            print(
                f"{r['name']:<16}{r['events']:>12,}{r['seconds']:>10.1f}{rate:>12,.0f}{ratio:>14.2f}"
            )
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
