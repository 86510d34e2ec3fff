"""Time to stage and publish one batch with each sink, and S3 requests per batch.

A typical batch: N sessions over 4 partitions, 5 page views per session, 1% late and 0.1%
invalid rows; staged as 4 partitions x 4 outputs, then published. S3 runs against
services/s3.sh (moto); its request log gives the number of requests per step.

    python benchmarks/sink_publish.py [--sessions 10000] [--batches 3]
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import statistics
import subprocess
import tempfile
import time
import uuid
from pathlib import Path

import numpy as np
import pyarrow as pa

from sessionize.schema import OUTPUTS
from sessionize.sinks.registry import open_sink

REPO = Path(__file__).resolve().parents[1]
LOG = REPO / ".services" / "s3" / "s3.log"
PARTITIONS = 4


def _table(name: str, n: int, seed: int) -> pa.Table:
    """n rows of output `name` with plausible values (two session dates)."""
    rng = np.random.default_rng(seed)
    schema = OUTPUTS[name]
    t0 = dt.datetime(2026, 11, 1, 23, 30, tzinfo=dt.UTC)
    cols = {}
    for f in schema:
        if f.name == "session_date":
            cols[f.name] = [(t0 + dt.timedelta(hours=int(h))).date() for h in rng.integers(0, 2, n)]
        elif pa.types.is_timestamp(f.type):
            cols[f.name] = [t0 + dt.timedelta(seconds=int(s)) for s in rng.integers(0, 3600, n)]
        elif pa.types.is_integer(f.type):
            cols[f.name] = rng.integers(0, 1_000_000, n)
        elif pa.types.is_list(f.type):
            cols[f.name] = [[f"/p/{i % 50}" for i in range(k)] for k in rng.integers(1, 8, n)]
        else:
            cols[f.name] = [f"{f.name}-{i % 997}" for i in rng.integers(0, 10**6, n)]
    return pa.table(cols, schema=schema)


def batch_tables(sessions: int) -> dict[str, list[pa.Table]]:
    sizes = {
        "sessions": sessions,
        "page_views": 5 * sessions,
        "late_events": sessions // 100,
        "invalid_events": sessions // 1000,
    }
    return {
        name: [_table(name, n // PARTITIONS, p) for p in range(PARTITIONS)]
        for name, n in sizes.items()
    }


def s3_requests() -> int:
    if not LOG.exists():
        return 0
    with LOG.open("rb") as f:
        return sum(1 for line in f if b" HTTP/1.1" in line)


def s3_root() -> str:
    import boto3

    endpoint = os.environ["SESSIONIZE_TEST_S3"]
    bucket = f"bench-{uuid.uuid4().hex[:8]}"
    boto3.client("s3", endpoint_url=endpoint).create_bucket(Bucket=bucket)
    host = endpoint.removeprefix("http://")
    return f"s3://{bucket}/out?endpoint_override={host}&scheme=http"


def measure(kind: str, root: str, tables: dict, batches: int) -> dict:
    sink = open_sink(root, kind.removesuffix("-s3"), job="bench")
    stage_s, publish_s, stage_req, publish_req = [], [], [], []
    for b in range(batches):
        r0, t0 = s3_requests(), time.perf_counter()
        sink.clear_staging(b)
        for name, parts in tables.items():
            for p, t in enumerate(parts):
                sink.write_part(name, b, p, t)
        r1, t1 = s3_requests(), time.perf_counter()
        sink.publish(b)
        r2, t2 = s3_requests(), time.perf_counter()
        stage_s.append(t1 - t0)
        publish_s.append(t2 - t1)
        stage_req.append(r1 - r0)
        publish_req.append(r2 - r1)
    med = statistics.median
    return {
        "stage_s": med(stage_s),
        "publish_s": med(publish_s),
        "stage_requests": med(stage_req),
        "publish_requests": med(publish_req),
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sessions", type=int, default=10_000)
    ap.add_argument("--batches", type=int, default=3)
    args = ap.parse_args()
    subprocess.run([str(REPO / "services" / "s3.sh"), "start"], check=True, capture_output=True)
    tables = batch_tables(args.sessions)
    print(
        f"batch: {args.sessions} sessions, {PARTITIONS} partitions x {len(tables)} outputs; "
        f"median of {args.batches} batches"
    )
    with tempfile.TemporaryDirectory() as tmp:
        for kind in ("parquet", "delta", "parquet-s3", "delta-s3"):
            root = s3_root() if kind.endswith("-s3") else f"{tmp}/{kind}"
            m = measure(kind, root, tables, args.batches)
            req = ""
            if kind.endswith("-s3"):
                req = (
                    f"  S3 requests: stage {m['stage_requests']:.0f} "
                    f"(per partition {m['stage_requests'] / PARTITIONS:.1f}), "
                    f"publish {m['publish_requests']:.0f}"
                )
            print(f"{kind:11s} stage {m['stage_s']:6.2f} s  publish {m['publish_s']:6.2f} s{req}")


if __name__ == "__main__":
    main()
