"""A small stream on each output and state placement, in one run and one SparkSession:
local Parquet (the reference), local Delta, Parquet on S3, Delta on S3, and Delta on S3 with
the `files` state on S3 too. Spark's checkpoint is local in every run. S3 is services/s3.sh
(moto, on SESSIONIZE_TEST_S3); its request log gives the S3 requests per micro-batch and
per micro-batch and partition.

    python benchmarks/object_storage.py [--users 2000] [--hours 2] [--events-per-hour 20000]
        [--runs parquet-local,delta-s3+state-s3]
"""

from __future__ import annotations

import argparse
import os
import re
import tempfile
import time
import uuid
from pathlib import Path
from urllib.parse import parse_qs

from bench_common import add_input_args, input_config, write_input

from sessionize.commands.stream import StreamOptions, run_stream
from sessionize.spark_session import get_spark

REPO = Path(__file__).resolve().parents[1]
LOG = REPO / ".services" / "s3" / "s3.log"
PARTITIONS = 3
RUNS = {  # name: (output format, output on S3, state on S3)
    "parquet-local": ("parquet", False, False),
    "delta-local": ("delta", False, False),
    "parquet-s3": ("parquet", True, False),
    "delta-s3": ("delta", True, False),
    "delta-s3+state-s3": ("delta", True, True),
}


def _requests(bucket: str, prefix: str) -> int:
    """Requests logged by the S3 server for keys of `bucket` under `prefix`, listings
    (a `prefix=` query on the bucket) included."""
    if not LOG.exists():
        return 0
    count = 0
    with open(LOG, errors="replace") as f:
        for line in f:
            m = _REQUEST.search(line)
            if not m or m["bucket"] != bucket:
                continue
            query = parse_qs(m["query"] or "")
            key = m["key"] or query.get("prefix", [""])[0]
            count += key.startswith(prefix)
    return count


_REQUEST = re.compile(
    r"(?:GET|PUT|POST|HEAD|DELETE) /(?P<bucket>[^/?\s]+)/?(?P<key>[^?\s]*)(?:\?(?P<query>\S*))?"
)


def main() -> None:
    ap = argparse.ArgumentParser()
    add_input_args(ap)
    ap.add_argument("--runs", default=",".join(RUNS), help="Which runs, comma-separated.")
    ap.set_defaults(users=2000, hours=2, events_per_hour=20000)
    args = ap.parse_args()
    import boto3

    endpoint = os.environ.get("SESSIONIZE_TEST_S3", "http://127.0.0.1:29900")
    client = boto3.client("s3", endpoint_url=endpoint)
    query = f"endpoint_override={endpoint.removeprefix('http://')}&scheme=http"
    work = Path(tempfile.mkdtemp(prefix="objbench-"))
    cfg = input_config(args)
    write_input(cfg, str(work / "in"))
    spark = get_spark("objbench", master="local[2]", shuffle_partitions=PARTITIONS)
    print(
        f"{'run':<18} {'batches':>7} {'events':>7} {'seconds':>7} {'events/s':>8} "
        f"{'vs local':>8}  S3 requests per batch (per batch and partition): "
        "outputs, state"
    )
    base_rate = None
    chosen = [(name, RUNS[name]) for name in args.runs.split(",")]
    runs = [("warm-up", RUNS["parquet-local"]), *chosen]  # JVM and Python workers
    for name, (fmt, out_s3, state_s3) in runs:
        bucket = f"b-{uuid.uuid4().hex[:10]}"
        client.create_bucket(Bucket=bucket)
        s3 = f"s3://{bucket}/{{}}?{query}"
        opts = StreamOptions(
            input=str(work / "in"),
            checkpoint=str(work / name / "chk"),
            output=s3.format("out") if out_s3 else str(work / name / "out"),
            state=f"files:{s3.format('state')}" if state_s3 else "files",
            partitions=PARTITIONS,
            max_files_per_trigger=1,
            output_format=fmt,
        )
        before = _requests(bucket, "out/"), _requests(bucket, "state/")
        t0 = time.perf_counter()
        records = run_stream(opts, spark, on_batch=lambda _line: None)
        seconds = time.perf_counter() - t0
        requests = _requests(bucket, "out/") - before[0], _requests(bucket, "state/") - before[1]
        events = sum(r["batch"]["records"] for r in records)
        rate = events / seconds
        if name == "warm-up":
            continue
        base_rate = base_rate or rate
        n = max(len(records), 1)
        cells = ", ".join(f"{r / n:.0f} ({r / n / PARTITIONS:.1f})" for r in requests)
        print(
            f"{name:<18} {len(records):>7} {events:>7} {seconds:>7.1f} {rate:>8.0f} "
            f"{rate / base_rate:>8.2f}  {cells}",
            flush=True,
        )


if __name__ == "__main__":
    main()
