"""The state store backends side by side on the engine's access pattern, measured in one run.

    .venv/bin/python benchmarks/state_backends.py [--keys 1000 10000] [--rows 5]
        [--backends files postgres redis dynamodb] [--batches 5] [--touched K]

Remote backends use the local servers of services/start.sh (their addresses from the
environment or .services/env.sh); each run gets its own schema / key prefix / table and
removes it afterwards. Per backend and state size N (keys, `--rows` rows each):

- initial: one transaction that writes all N keys from the empty state;
- batch: what a partition task does per micro-batch, `--batches` times: open the previous
  version, read the keys expiring before the watermark (~2% of the keys) and the batch's
  users (10% of N: half existing, half new), remove the expired keys, put the batch users'
  new rows, commit the next version (median of the batches);
- cold: a new backend instance (no process cache) opens the newest version and reads 10% of
  the keys, and the expiring ones;
- restore: the same at the first version (reprocessing).

With `--touched K` every batch touches K users (half known, half new) and about K/2 expire,
whatever N is: per-batch time against state size at the same work (`--keys 10000 100000
1000000 --touched 5000 --batches 12`); the mean and max over the batches include the
`files` store's snapshots and folds, which come more rarely as the state grows.

Prints milliseconds, round trips and bytes written per step, and each backend's batch time
as a ratio to `files` measured in the same run; for DynamoDB also the items written (puts
and deletes) and their billed bytes per changed key (put or removed) of a batch, and the
writes DynamoDB itself makes to the expiry index for them (estimated: 1 for an item that
enters or leaves it, 2 for one whose index value changes).
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow as pa
from bench_common import write_json

from sessionize import schema
from sessionize.state.base import StateBackend

REPO = Path(__file__).resolve().parents[1]
T0 = 1_700_000_000_000_000  # us


def service(variable: str) -> str | None:
    if variable in os.environ:
        return os.environ[variable]
    env = REPO / ".services" / "env.sh"
    if env.exists():
        m = re.search(rf"\b{variable}=(\S+)", env.read_text())
        if m:
            return m.group(1)
    return None


def state_rows(
    keys: np.ndarray, rows: int, at: int, rng: np.random.Generator, spread: int = 600_000_000
) -> pa.Table:
    """`rows` events per key, within `spread` before `at`, expiring 10 minutes after the last."""
    n = len(keys) * rows
    user = np.repeat(keys, rows)
    times = at - rng.integers(0, spread, n)
    last = np.maximum.reduceat(times, np.arange(0, n, rows)) if n else times
    expires = np.repeat(last + 600_000_000, rows)
    pages = np.char.add("category ", rng.integers(0, 300, n).astype(str))
    cols = {
        "user_id": pa.array(user, pa.int64()),
        "event_time": pa.array(times, schema.TS),
        "page": pa.array(pages),
        "action": pa.array(np.where(rng.random(n) < 0.05, "click", "view")),
        "site": pa.array(["mysite.com"] * n),
        "api_version": pa.array(["v3"] * n),
        "browser": pa.array(np.char.add("Firefox ", rng.integers(50, 60, n).astype(str))),
        "language": pa.array(["en"] * n),
        "device_type": pa.array(np.where(rng.random(n) < 0.3, "tablet", "pc")),
        "expires_at": pa.array(expires, schema.TS),
    }
    return pa.table(cols, schema=schema.STATE)


def make_backends(names: list[str]) -> dict[str, tuple[Callable[[bool], StateBackend], Callable]]:
    """name -> (make(cache) -> backend, cleanup())."""
    import tempfile

    out = {}
    tag = f"bench{uuid.uuid4().hex[:8]}"
    for name in names:
        if name == "files":
            from sessionize.state.backends.files import FilesBackend

            root = tempfile.mkdtemp(prefix="bench-state-")

            def make(cache=True, root=root):
                return FilesBackend(root, cache_mb=256 if cache else 0)

            def clean(root=root):
                import shutil

                shutil.rmtree(root, ignore_errors=True)

            out[name] = (make, clean)
        elif name == "postgres":
            from sessionize.state.backends.postgres import PostgresBackend

            uri = service("SESSIONIZE_TEST_POSTGRES")
            if not uri:
                print("postgres: not running (services/start.sh postgres)", file=sys.stderr)
                continue

            def make(cache=True, uri=uri):
                return PostgresBackend(f"{uri}?schema={tag}")

            def clean(uri=uri):
                import psycopg

                with psycopg.connect(uri, autocommit=True) as conn:
                    conn.execute(f'DROP SCHEMA IF EXISTS "{tag}" CASCADE')

            out[name] = (make, clean)
        elif name == "redis":
            from sessionize.state.backends.redis import RedisBackend

            uri = service("SESSIONIZE_TEST_REDIS")
            if not uri:
                print("redis: not running (services/start.sh redis)", file=sys.stderr)
                continue

            def make(cache=True, uri=uri):
                return RedisBackend(f"{uri}?prefix={tag}")

            def clean(uri=uri):
                import redis

                r = redis.Redis.from_url(uri)
                keys = list(r.scan_iter(f"{tag}:*", count=1000))
                for i in range(0, len(keys), 1000):
                    r.delete(*keys[i : i + 1000])

            out[name] = (make, clean)
        elif name == "dynamodb":
            from sessionize.state.backends.dynamodb import DynamoDBBackend

            endpoint = service("SESSIONIZE_TEST_DYNAMODB")
            if not endpoint:
                print("dynamodb: not running (services/start.sh dynamodb)", file=sys.stderr)
                continue
            os.environ.setdefault("AWS_ACCESS_KEY_ID", "sessionize-local")
            os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "sessionize-local")

            def make(cache=True, endpoint=endpoint):
                return DynamoDBBackend(tag, endpoint=endpoint, region="us-east-1")

            def clean(make=make):
                b = make()
                b.client.client.delete_table(TableName=b.table)

            out[name] = (make, clean)
        else:
            raise SystemExit(f"unknown backend {name}")
    return out


def run(
    make: Callable[[bool], StateBackend],
    n: int,
    rows: int,
    batches: int,
    touched: int | None = None,
) -> dict:
    """With `touched`, each batch touches that many users (half known, half new) and about
    half as many expire, whatever `n` is: the state grows, the work per batch does not."""
    rng = np.random.default_rng(7)
    job = f"j{n}"
    backend = make(True)
    backend.check()
    keys = np.arange(n, dtype=np.int64)
    now = T0
    # Without `touched`: 10% of the keys touched, ~2% expiring per batch. With it, the last
    # events spread so that each minute of watermark expires touched/2 keys.
    spread = 600_000_000 if touched is None else 60_000_000 * 2 * n // touched
    table = state_rows(keys, rows, now, rng, spread)

    t = time.perf_counter()
    ps = backend.open(job, 0, -1)
    ps.put_many(table)
    ps.commit(0)
    m = ps.metrics()
    out = {
        "initial_ms": (time.perf_counter() - t) * 1000,
        "initial_trips": m.round_trips,
        "initial_bytes": m.bytes_written,
    }

    next_key = n
    times, trips, written, per_key = [], [], [], []
    for v in range(1, batches + 1):
        now += 60_000_000
        if touched is None:
            watermark = now - 600_000_000 + 12_000_000  # ~2% of keys expire per batch
        else:
            watermark = T0 - spread + 600_000_000 + (now - T0)
        half = n // 20 if touched is None else touched // 2
        old = rng.choice(next_key, size=half, replace=False)
        new = np.arange(next_key, next_key + half, dtype=np.int64)
        next_key += len(new)
        batch_users = np.concatenate([old, new])
        t = time.perf_counter()
        ps = backend.open(job, 0, v - 1)
        expiring = ps.expiring(watermark)
        wanted = np.union1d(batch_users, expiring.to_numpy())
        ps.get_many(wanted)
        gone = np.setdiff1d(expiring.to_numpy(), batch_users)
        ps.remove_many(gone)
        ps.put_many(state_rows(batch_users, rows, now, rng))
        ps.commit(v)
        times.append((time.perf_counter() - t) * 1000)
        m = ps.metrics()
        trips.append(m.round_trips)
        written.append(m.bytes_written)
        changed = len(batch_users) + len(gone)
        if "items_written" in m.extra:  # stores that count the items (rows) they write
            per_key.append(
                (
                    m.extra["items_written"] / changed,
                    m.extra["item_bytes_written"] / changed,
                    m.extra.get("index_writes", 0) / changed,
                )
            )
    if per_key:
        out.update(
            items_per_key=statistics.median(i for i, _, _ in per_key),
            item_bytes_per_key=statistics.median(b for _, b, _ in per_key),
            index_per_key=statistics.median(x for _, _, x in per_key),
        )
    out.update(
        batch_ms=statistics.median(times),
        batch_trips=statistics.median(trips),
        batch_bytes=statistics.median(written),
        batch_mean_ms=statistics.mean(times),
        batch_max_ms=max(times),
    )

    for step, version in (("cold", batches), ("restore", 0)):
        fresh = make(False)
        t = time.perf_counter()
        with fresh.open(job, 0, version) as ps:
            ps.expiring(now - 600_000_000)
            ps.get_many(rng.choice(n, size=n // 10, replace=False))
            out[f"{step}_trips"] = ps.metrics().round_trips
        out[f"{step}_ms"] = (time.perf_counter() - t) * 1000
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--keys", type=int, nargs="+", default=[1000, 10_000])
    ap.add_argument("--rows", type=int, default=5)
    ap.add_argument("--batches", type=int, default=5)
    ap.add_argument("--backends", nargs="+", default=["files", "postgres", "redis", "dynamodb"])
    ap.add_argument(
        "--touched",
        type=int,
        default=None,
        help="users per batch, the same for every state size (default: 10%%)",
    )
    ap.add_argument("--json", metavar="PATH", help="also write the results as JSON (plot.py)")
    args = ap.parse_args()
    backends = make_backends(args.backends)
    results: dict[tuple[str, int], dict] = {}
    try:
        for n in args.keys:
            for name, (make, _) in backends.items():
                results[(name, n)] = run(make, n, args.rows, args.batches, args.touched)
    finally:
        for _, clean in backends.values():
            clean()

    if args.json:
        rows = [{"backend": name, "keys": n, **r} for (name, n), r in results.items()]
        write_json(args.json, "state_backends", rows)
    head = (
        f"{'backend':<9} {'keys':>6} {'init ms':>8} {'trips':>5} {'MB':>6} | {'batch ms':>8}"
        f" {'trips':>5} {'KB':>7} {'x files':>7} {'mean':>7} {'max':>7}"
        f" | {'cold ms':>7} {'trips':>5}"
        f" | {'restore ms':>10} {'trips':>5}"
    )
    print(head)
    print("-" * len(head))
    for (name, n), r in results.items():
        base = results.get(("files", n))
        ratio = f"{r['batch_ms'] / base['batch_ms']:.2f}" if base else "-"
        print(
            f"{name:<9} {n:>6} {r['initial_ms']:>8.1f} {r['initial_trips']:>5}"
            f" {r['initial_bytes'] / 1e6:>6.2f} | {r['batch_ms']:>8.1f} {r['batch_trips']:>5.0f}"
            f" {r['batch_bytes'] / 1e3:>7.1f} {ratio:>7} {r['batch_mean_ms']:>7.1f}"
            f" {r['batch_max_ms']:>7.1f} | {r['cold_ms']:>7.1f}"
            f" {r['cold_trips']:>5} | {r['restore_ms']:>10.1f} {r['restore_trips']:>5}"
        )
    for (name, n), r in results.items():
        if "items_per_key" in r:
            print(
                f"{name} {n} keys: per changed key and batch {r['items_per_key']:.3f} items"
                f" written, {r['item_bytes_per_key']:.0f} item bytes; index writes made by"
                f" the server {r['index_per_key']:.3f}"
            )


if __name__ == "__main__":
    main()
