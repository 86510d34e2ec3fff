"""Throughput of the engines against a stateless read-parse-write of the same input.

    .venv/bin/python benchmarks/throughput.py [--users 20000 --hours 5 --events-per-hour 100000]
        [--files-per-trigger N] [--only CONTENDER ...]

Generates the input once (two files per hour), then runs every contender in a fresh process
(so no JVM or cache carries over), timing only the work: from the first read to the last
committed write. Streams read everything in one micro-batch unless --files-per-trigger is
given (2 = one micro-batch per hour, like the batch mode). Prints events/s per contender and
its ratio to the stateless figure, all measured in this run; for our engine also the state
store's round trips and bytes per partition and micro-batch.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

from bench_common import add_input_args, input_config, run_fresh, write_input

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


def run_contender(
    name: str, inp: str, work: str, partitions: int, files_per_trigger: int | None
) -> dict:
    """Inside the fresh process: run one contender, return its timing (and state I/O)."""
    from sessionize.spark_session import get_spark

    spark = get_spark(f"bench-{name}", shuffle_partitions=partitions)
    spark.range(1).count()  # JVM and Python workers up before the clock starts
    t0 = time.perf_counter()
    io: dict[str, int] = {}
    if name == "stateless":
        from sessionize.parsing import parse
        from sessionize.sources.files import file_batch

        parse(file_batch(spark, [inp])).write.mode("overwrite").parquet(f"{work}/out")
        events = spark.read.parquet(f"{work}/out").count()
    elif name.startswith(("store-", "spark-")):
        from sessionize.commands.stream import StreamOptions, run_stream

        opts = StreamOptions(
            input=inp,
            output=f"{work}/out",
            checkpoint=f"{work}/chk",
            state=name if name.startswith("spark-") else _state_uri(name),
            partitions=partitions,
            max_files_per_trigger=files_per_trigger,
        )
        records = run_stream(opts, spark, on_batch=lambda _: None)
        events = sum(r["batch"]["records"] for r in records)
        io = _state_io(records, partitions)
    elif name == "session-window":
        events = _session_window(spark, inp, work, partitions)
    elif name == "batch-files":
        from sessionize.commands.batch import BatchOptions, run_batch

        hours = sorted(Path(inp).glob("event_date=*/event_hour=*"))
        first, last = (_hour_of(h) for h in (hours[0], hours[-1]))
        opts = BatchOptions(
            input=inp, output=f"{work}/out", start=first, end=last, partitions=partitions
        )
        records = run_batch(opts, spark, lambda _: None)
        events = sum(r["batch"]["records"] for r in records)
        io = _state_io(records, partitions)
    else:
        raise SystemExit(f"unknown contender {name}; known: {', '.join(CONTENDERS)}")
    return {"name": name, "events": events, "seconds": time.perf_counter() - t0, **io}


def _state_io(records: list[dict], partitions: int) -> dict[str, int]:
    """Micro-batches, and the store's round trips and bytes per partition and batch."""
    if not records or "state_round_trips" not in records[0]["batch"]:
        return {"batches": len(records)}  # Spark's own state store: not ours to count
    tasks = len(records) * partitions
    per_task = {
        f"{k}_per_task": round(sum(r["batch"][f"state_{k}"] for r in records) / tasks)
        for k in ("round_trips", "bytes_read", "bytes_written")
    }
    return {"batches": len(records), **per_task}


def _hour_of(path: Path) -> datetime:
    day = path.parent.name.split("=", 1)[1]
    return datetime.strptime(f"{day}T{path.name.split('=', 1)[1]}", "%Y-%m-%dT%H").replace(
        tzinfo=UTC
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_input_args(ap)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--files-per-trigger", type=int, help="streams: files per micro-batch")
    ap.add_argument("--only", nargs="*", default=list(DEFAULT), choices=CONTENDERS)
    ap.add_argument("--run", help=argparse.SUPPRESS)  # internal: one contender, this process
    ap.add_argument("--input", help=argparse.SUPPRESS)
    ap.add_argument("--work", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.run:
        result = run_contender(
            args.run, args.input, args.work, args.partitions, args.files_per_trigger
        )
        print(json.dumps(result))
        return

    root = Path(tempfile.mkdtemp(prefix="sessionize-bench-"))
    try:
        write_input(input_config(args), str(root / "input"))
        results = []
        for name in args.only:
            work = root / name
            results.append(
                run_fresh(__file__, name, str(root / "input"), str(work), args.partitions,
                          ["--files-per-trigger", str(args.files_per_trigger)]
                          if args.files_per_trigger else [])
            )  # fmt: skip
            shutil.rmtree(work, ignore_errors=True)
        base = next((r for r in results if r["name"] == "stateless"), None)
        print(
            f"{'contender':<16}{'events':>10}{'batches':>8}{'seconds':>9}{'events/s':>10}"
            f"{'vs stateless':>13}  state per partition-batch"
        )
        for r in results:
            rate = r["events"] / r["seconds"]
            ratio = rate / (base["events"] / base["seconds"]) if base else float("nan")
            io = (
                f"  {r['round_trips_per_task']} round trips, "
                f"{r['bytes_read_per_task'] / 1e3:,.0f} kB read, "
                f"{r['bytes_written_per_task'] / 1e3:,.0f} kB written"
                if "round_trips_per_task" in r
                else ""
            )
            print(
                f"{r['name']:<16}{r['events']:>10,}{r.get('batches', 1):>8}{r['seconds']:>9.1f}"
                f"{rate:>10,.0f}{ratio:>13.2f}{io}"
            )
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
