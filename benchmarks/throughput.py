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

# Contenders, each run in a fresh process on the same input. `store-*` differ only in the
# state backend; `spark-*` keep state in Spark's state store; `session-window` is Spark's
# built-in aggregation (JVM only: no explicit closes, no page lists, no late/invalid outputs);
# `batch-files` runs the same engine once per hour over the whole input.
CONTENDERS = (
    "stateless", "store-files", "store-postgres", "store-redis", "store-dynamodb",
    "spark-rocksdb", "spark-hdfs", "session-window", "batch-files",
)  # fmt: skip
DEFAULT = ("stateless", "store-files", "spark-rocksdb", "spark-hdfs", "session-window")
REMOTE_STATE_ENV = {
    "store-postgres": "SESSIONIZE_TEST_POSTGRES",
    "store-redis": "SESSIONIZE_TEST_REDIS",
    "store-dynamodb": "SESSIONIZE_TEST_DYNAMODB",
}


def _state_uri(name: str) -> str:
    if name == "store-files":
        return "files"
    value = os.environ.get(REMOTE_STATE_ENV[name])
    if not value:
        raise SystemExit(
            f"{name}: {REMOTE_STATE_ENV[name]} is not set; run services/start.sh and "
            "source .services/env.sh"
        )
    if name == "store-dynamodb":
        return f"dynamodb://bench{os.getpid()}?endpoint={value}&region=us-east-1"
    if name == "store-postgres":
        return value + ("&" if "?" in value else "?") + f"schema=bench{os.getpid()}"
    return value + ("&" if "?" in value else "?") + f"prefix=bench{os.getpid()}"


def _session_window(spark, inp: str, work: str, partitions: int) -> int:
    """Spark's own streaming session_window over the same parsed, valid events."""
    from pyspark.sql import functions as F

    from sessionize.parsing import parse
    from sessionize.sources.files import file_stream

    events = parse(file_stream(spark, inp)).where(F.col("reason").isNull())
    sessions = (
        events.withWatermark("event_time", "10 minutes")
        .dropDuplicatesWithinWatermark(["user_id", "event_time", "page"])
        .groupBy("user_id", F.session_window("event_time", "10 minutes").alias("w"))
        .agg(F.count(F.lit(1)).alias("event_count"))
    )
    query = (
        sessions.writeStream.format("parquet")
        .option("path", f"{work}/out")
        .option("checkpointLocation", f"{work}/chk")
        .outputMode("append")
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    return spark.read.text(inp, recursiveFileLookup=True).count()


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
    elif name.startswith(("store-", "spark-")):
        from sessionize.stream import StreamOptions, run_stream

        opts = StreamOptions(
            input=inp,
            output=f"{work}/out",
            checkpoint=f"{work}/chk",
            state=name if name.startswith("spark-") else _state_uri(name),
            partitions=partitions,
        )
        records = run_stream(opts, spark, on_batch=lambda _: None)
        events = sum(r["batch"]["records"] for r in records)
    elif name == "session-window":
        events = _session_window(spark, inp, work, partitions)
    elif name == "batch-files":
        from sessionize.batch import BatchOptions, run_batch

        hours = sorted(Path(inp).glob("event_date=*/event_hour=*"))
        first, last = (_hour_of(h) for h in (hours[0], hours[-1]))
        opts = BatchOptions(
            input=inp, output=f"{work}/out", start=first, end=last, partitions=partitions
        )
        events = sum(r["batch"]["records"] for r in run_batch(opts, spark, lambda _: None))
    else:
        raise SystemExit(f"unknown contender {name}; known: {', '.join(CONTENDERS)}")
    return {"name": name, "events": events, "seconds": time.perf_counter() - t0}


def _hour_of(path: Path) -> datetime:
    day = path.parent.name.split("=", 1)[1]
    return datetime.strptime(f"{day}T{path.name.split('=', 1)[1]}", "%Y-%m-%dT%H").replace(
        tzinfo=UTC
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--users", type=int, default=20000)
    ap.add_argument("--hours", type=int, default=5)
    ap.add_argument("--events-per-hour", type=int, default=100_000)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--only", nargs="*", default=list(DEFAULT), choices=CONTENDERS)
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
