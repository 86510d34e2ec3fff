"""What identity stitching keeps in each state store: bytes per identity, per backend.

    .venv/bin/python benchmarks/identity_state.py [--ids 100000 1000000]
        [--backends files postgres redis dynamodb] [--logged-in 0.3]

A job's state built as the session job builds it, through the keyed core's `step` and
the session processor, one partition, without Spark: `--ids` anonymous ids (`d` and a
number, as `generate --identity-data` writes them) with one event each, a share of them
logged in (a user id `u` and a number), in a first batch that leaves every session open;
then a batch an hour later with no events, whose watermark closes them all. After the
second batch only the identity rows remain (docs/concepts/identity.md). The same events in
a job without `--anonymous-field` (the anonymous id as the user key) leave an empty state.

Per backend and size it prints the bytes of the state after the first batch (per open
session of one event: the reference) and after the second (per identity, with identity;
what is left, without), measured as each store holds them:

- files: the job's files on disk (one snapshot per version, `snapshot_every=1`, the
  older versions removed by maintenance keeping 1);
- postgresql: `pg_total_relation_size` of the schema's tables (indexes included), after
  maintenance keeping 1 version and `VACUUM FULL` (so dead row versions are not counted);
- redis: the sum of `MEMORY USAGE key SAMPLES 0` over the job's keys, after maintenance;
- dynamodb: the job's items sized by DynamoDB's item-size rule (attribute names plus
  values; a number by its digits), as read units and write units bill them; storage adds
  100 bytes per item and the expiry index's entry.

Remote stores use the local servers (`source .services/env.sh`); each run gets its own
schema, key prefix or table and removes it afterwards. The users step's state (a row per
stitched user, the store job `JOB.users`) is measured by users_state.py, by these rules.
"""

from __future__ import annotations

import argparse
import math
import os
import shutil
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path

import numpy as np
import pyarrow as pa
from state_backends import service

from sessionize.config import SessionRules
from sessionize.core.declared import declared
from sessionize.core.keys import store_keys
from sessionize.core.step import step
from sessionize.logic.processor import SessionProcessor
from sessionize.mapping import EventMapping
from sessionize.schema import layout
from sessionize.state.base import StateBackend
from sessionize.state.registry import open_backend

T0 = 1_793_491_200_000_000  # 2026-11-01T00:00Z, microseconds
HOUR = 3_600_000_000
DAY = 24 * HOUR


@dataclass
class Measured:
    open_bytes: int  # after the first batch: every session open
    closed_bytes: int  # after the second: every session closed
    keys_left: int  # store keys holding rows after the second batch
    build_s: float  # both batches, store reads and commits included
    measure_s: float


def events(n: int, logged_in: float, identity: bool) -> pa.Table:
    """One event per anonymous id in the first hour, a share of them with a user id."""
    rng = np.random.default_rng(5)
    ids = np.char.add("d", np.arange(n).astype(str))
    times = T0 + rng.integers(0, HOUR - 900_000_000, n)
    pages = np.char.add("/p", rng.integers(0, 200, n).astype(str))
    cols = {
        "user_id": pa.array(ids),
        "event_time": pa.array(times, pa.timestamp("us", tz="UTC")),
        "page": pa.array(pages),
        "action": pa.array(["view"] * n),
        "site": pa.array(["shop.example"] * n),
        "api_version": pa.array(["v3"] * n),
        "browser": pa.array(np.char.add("Firefox ", rng.integers(50, 60, n).astype(str))),
        "language": pa.array(["en"] * n),
        "device_type": pa.array(np.where(rng.random(n) < 0.3, "mobile", "desktop")),
    }
    if identity:
        users = np.char.add("u", rng.integers(0, n // 2 + 1, n).astype(str))
        cols["sent_user_id"] = pa.array(users, mask=rng.random(n) >= logged_in)
    return pa.table(cols)


def processor(identity: bool) -> SessionProcessor:
    if identity:
        mapping = EventMapping(anonymous="anonymous_id", user_type="string")
        return SessionProcessor(SessionRules(user_ttl_us=400 * DAY), layout(mapping))
    return SessionProcessor(SessionRules(), layout(EventMapping(user_type="string")))


def advance(backend: StateBackend, job: str, p: SessionProcessor, version: int, rows, wm) -> int:
    """One batch of partition 0, as the engine's partition task runs it (without Spark)."""
    store = backend.open(job, 0, version - 1)
    keys = store_keys(rows.column("user_id")).unique()
    due = pa.array(store.expiring(wm[1]), pa.int64())
    keys = pa.concat_arrays([keys, due]).unique()
    result = step(
        p,
        store.get_many(keys),
        rows,
        batch_id=version,
        partition=0,
        watermark_before=wm[0],
        watermark_after=wm[1],
    )
    store.remove_many(result.removes)
    store.put_many(result.puts)
    store.commit(version, dict(store.meta))
    return result.puts.num_rows


def keys_at(backend: StateBackend, job: str, version: int) -> int:
    """The store keys with a row at `version` (every row expires within 1,000 days)."""
    with backend.open(job, 0, version) as store:
        return len(store.expiring(T0 + 1000 * DAY))


def files_bytes(root: str) -> int:
    return sum(f.stat().st_size for f in Path(root).rglob("*") if f.is_file())


def postgres_bytes(uri: str, schema: str) -> int:
    import psycopg

    with psycopg.connect(uri, autocommit=True) as conn:
        tables = [
            r[0]
            for r in conn.execute(
                "SELECT table_name FROM information_schema.tables WHERE table_schema = %s",
                (schema,),
            )
        ]
        total = 0
        for t in tables:
            conn.execute(f'VACUUM FULL "{schema}"."{t}"')
            total += conn.execute(
                "SELECT pg_total_relation_size(%s::regclass)", (f'"{schema}"."{t}"',)
            ).fetchone()[0]
        return total


def redis_bytes(uri: str, prefix: str) -> int:
    import redis

    r = redis.Redis.from_url(uri)
    keys = list(r.scan_iter(f"{prefix}:*", count=1000))
    pipe = r.pipeline(transaction=False)
    for k in keys:
        pipe.execute_command("MEMORY", "USAGE", k, "SAMPLES", "0")
    return sum(x or 0 for x in pipe.execute())


def _value_size(v) -> int:
    """DynamoDB's size of an attribute value (as boto3's resource layer decodes it)."""
    if isinstance(v, str):
        return len(v.encode())
    if isinstance(v, bytes | bytearray):
        return len(v)
    if hasattr(v, "value"):  # boto3 Binary
        return len(v.value)
    if isinstance(v, bool) or v is None:
        return 1
    if isinstance(v, int | float | Decimal):
        digits = len(str(abs(v)).replace(".", "").strip("0")) or 1
        return math.ceil(digits / 2) + 1
    if isinstance(v, dict):
        return 3 + sum(len(k.encode()) + _value_size(x) + 1 for k, x in v.items())
    if isinstance(v, list | set):
        return 3 + sum(_value_size(x) + 1 for x in v)
    raise TypeError(type(v))


def dynamodb_bytes(endpoint: str, table: str, latest_only: bool = False) -> int:
    """The item bytes of `table`; with `latest_only`, each key item as if it held its
    newest entry only (it keeps the older ones until the key is written again)."""
    import boto3

    t = boto3.resource("dynamodb", endpoint_url=endpoint, region_name="us-east-1").Table(table)
    total, start = 0, None
    while True:
        page = t.scan(**({"ExclusiveStartKey": start} if start else {}))
        for item in page["Items"]:
            size = sum(len(k.encode()) + _value_size(v) for k, v in item.items())
            if latest_only and "h" in item:
                # Less the entries before the newest one: their text in h, their values in b.
                entries = item["h"].split(";")
                older = [int(e.split(".")[3]) for e in entries[:-1]]
                size -= len(item["h"]) - len(entries[-1]) + sum(max(x, 0) for x in older)
            total += size
        start = page.get("LastEvaluatedKey")
        if not start:
            return total


def where(name: str) -> tuple | None:
    """(state URI, its size now, remove it[, its size counting each key's newest value
    only]) of a new place in backend `name`."""
    tag = f"bench{uuid.uuid4().hex[:8]}"
    if name == "files":
        root = tempfile.mkdtemp(prefix="bench-identity-")
        return (
            f"files:{root}?snapshot_every=1&cache_mb=1024",
            lambda: files_bytes(root),
            lambda: shutil.rmtree(root, ignore_errors=True),
        )
    variable = {
        "postgres": "SESSIONIZE_TEST_POSTGRES",
        "redis": "SESSIONIZE_TEST_REDIS",
        "dynamodb": "SESSIONIZE_TEST_DYNAMODB",
    }[name]
    server = service(variable)
    if not server:
        print(f"{name}: not running ({variable} unset: source .services/env.sh)", file=sys.stderr)
        return None
    if name == "postgres":
        return (
            f"{server}?schema={tag}",
            lambda: postgres_bytes(server, tag),
            lambda: _drop_schema(server, tag),
        )
    if name == "redis":
        return (
            f"{server}?prefix={tag}",
            lambda: redis_bytes(server, tag),
            lambda: _drop_redis(server, tag),
        )
    os.environ.setdefault("AWS_ACCESS_KEY_ID", "sessionize-local")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "sessionize-local")
    table = f"{tag}_state"
    return (
        f"dynamodb://{tag}?region=us-east-1&endpoint={server}",
        lambda: dynamodb_bytes(server, table),
        lambda: _dynamodb(server).delete_table(TableName=table),
        lambda: dynamodb_bytes(server, table, latest_only=True),
    )


def _drop_schema(uri: str, schema: str) -> None:
    import psycopg

    with psycopg.connect(uri, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


def _drop_redis(uri: str, prefix: str) -> None:
    import redis

    # Millions of keys: scanned and unlinked in pages, with time for a busy shared server.
    r = redis.Redis.from_url(uri, socket_timeout=600)
    keys = list(r.scan_iter(f"{prefix}:*", count=10_000))
    for i in range(0, len(keys), 1000):
        r.unlink(*keys[i : i + 1000])


def _dynamodb(endpoint: str):
    import boto3

    return boto3.client("dynamodb", endpoint_url=endpoint, region_name="us-east-1")


def measure(
    uri: str,
    size_of: Callable[[], int],
    n: int,
    identity: bool,
    logged_in: float,
) -> Measured:
    p = processor(identity)
    backend = open_backend(uri, declared(p).rows)
    backend.check()
    job = f"id{'y' if identity else 'n'}{n}"
    rows = events(n, logged_in, identity)
    t = time.perf_counter()
    advance(backend, job, p, 0, rows, (None, T0))
    build = time.perf_counter() - t
    t = time.perf_counter()
    open_bytes = size_of()
    measured = time.perf_counter() - t
    t = time.perf_counter()
    advance(backend, job, p, 1, rows.schema.empty_table(), (T0, T0 + 2 * HOUR))
    backend.maintenance(job, 0, 1)
    build += time.perf_counter() - t
    t = time.perf_counter()
    closed = size_of()
    measured += time.perf_counter() - t
    return Measured(open_bytes, closed, keys_at(backend, job, 1), build, measured)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ids", type=int, nargs="+", default=[100_000])
    ap.add_argument("--backends", nargs="+", default=["files", "postgres", "redis", "dynamodb"])
    ap.add_argument("--logged-in", type=float, default=0.3, help="share of events with a user")
    args = ap.parse_args()
    print(f"load: {os.getloadavg()[0]:.1f} {os.getloadavg()[1]:.1f} {os.getloadavg()[2]:.1f}")
    head = (
        f"{'backend':<9} {'ids':>8} {'job':<12} {'open B/session':>14} "
        f"{'closed B/id':>11} {'keys left':>9} {'build s':>8} {'measure s':>9}"
    )
    print(head)
    print("-" * len(head), flush=True)
    for n in args.ids:
        for name in args.backends:
            for identity in (True, False):
                # A fresh schema / prefix / table per job: sizes of one job's state only.
                place = where(name)
                if place is None:
                    continue
                uri, size_of, clean, *newest = place
                try:
                    m = measure(uri, size_of, n, identity, args.logged_in)
                    if newest and identity:
                        latest = newest[0]() / n
                finally:
                    clean()
                what = "identity" if identity else "no identity"
                closed = f"{m.closed_bytes / n:>11.1f}" if identity else f"{m.closed_bytes:>9} B"
                print(
                    f"{name:<9} {n:>8} {what:<12} {m.open_bytes / n:>14.1f} {closed:>11}"
                    f" {m.keys_left:>9} {m.build_s:>8.1f} {m.measure_s:>9.1f}",
                    flush=True,
                )
                if newest and identity:
                    print(
                        f"{'':<9} {'':>8} {'':<12} {'':>14} {latest:>11.1f}"
                        "  (each key item's newest entry only)",
                        flush=True,
                    )
    print(f"load: {os.getloadavg()[0]:.1f} {os.getloadavg()[1]:.1f} {os.getloadavg()[2]:.1f}")


if __name__ == "__main__":
    main()
