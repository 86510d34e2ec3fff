"""What expiry checks cost over a lazily read `files` partition, in one process (no Spark).

    .venv/bin/python benchmarks/lazy_expiry.py [--users 625000] [--checks 20] [--every 30]
        [--spread 30] [--json PATH]

Commits one partition of `--users` open users (one event each, the columns a session keeps,
expiring uniformly over `--spread` minutes) as a snapshot read by row group (as a partition
above `lazy_mb` is: 256-row groups), then runs `--checks` expiry checks `--every` seconds
apart, as the `store` engine's batches do: each opens the last version (from the process
cache), asks for the keys due before the check's time and commits a version removing them.
Prints, per check, the keys due, the bytes and row groups the check read from the snapshot
and its time, then the totals and what the process cache accounts for the partition.
Run it on a code version to compare (e.g. with PYTHONPATH pointing at another checkout's
src: the script uses the store's public API and metrics only).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from state_backends import state_rows

from sessionize import schema
from sessionize.state.backends.files import FilesBackend
from sessionize.state.cache import process_cache

JOB = "bench"
E0 = 1_790_000_000_000_000  # the earliest expiry (microseconds)
MINUTE = 60_000_000


def state(users: int, spread_min: int, rng: np.random.Generator) -> pa.Table:
    """One event per user (sparse random ids), expiring uniformly over `spread_min`
    minutes from E0, ten minutes after the event."""
    keys = np.sort(rng.choice(8 * users, users, replace=False)).astype(np.int64)
    spread = spread_min * MINUTE
    return state_rows(keys, 1, E0 - 10 * MINUTE + spread, rng, spread)


def run(root: Path, users: int, checks: int, every_s: int, spread_min: int) -> dict:
    # lazy_mb=0: read by row group whatever the partition's size (the default, 32 MB, is
    # below a 625k-user partition's); the default cache (256 MB)
    store = FilesBackend(str(root), lazy_mb=0)
    with store.open(JOB, 0, -1) as ps:
        ps.put_many(state(users, spread_min, np.random.default_rng(7)))
        ps.commit(0)
    (snapshot,) = root.glob(f"{JOB}/partition=0/*.snapshot.parquet")
    meta = pq.read_metadata(snapshot)
    names = meta.schema.names
    columns = [names.index(schema.STATE_KEY), names.index(schema.STATE_EXPIRY)]
    key_expiry_bytes = sum(
        meta.row_group(g).column(c).total_compressed_size
        for g in range(meta.num_row_groups)
        for c in columns
    )
    rows = []
    for i in range(checks):
        upto = E0 + (i + 1) * every_s * 1_000_000
        with store.open(JOB, 0, i) as ps:
            before = ps.metrics()
            t0 = time.perf_counter()
            due = ps.expiring(upto)
            check_ms = (time.perf_counter() - t0) * 1000
            after = ps.metrics()
            ps.remove_many(due)
            t1 = time.perf_counter()
            ps.commit(i + 1)
            commit_ms = (time.perf_counter() - t1) * 1000
        memory = process_cache().nbytes  # what it accounts for the partition
        groups = after.extra.get("row_groups_read", 0) - before.extra.get("row_groups_read", 0)
        rows.append(
            {
                "check": i + 1,
                "due": len(due),
                "bytes_read": after.bytes_read - before.bytes_read,
                "row_groups_read": groups,
                "check_ms": round(check_ms, 1),
                "commit_ms": round(commit_ms, 1),
                "cache_nbytes": memory,
            }
        )
    return {
        "users": users,
        "file_bytes": snapshot.stat().st_size,
        "row_groups": meta.num_row_groups,
        "key_expiry_bytes": key_expiry_bytes,
        "checks": rows,
        "bytes_read": sum(r["bytes_read"] for r in rows),
        "first_check_ms": rows[0]["check_ms"],
        "later_check_ms_median": statistics.median(r["check_ms"] for r in rows[1:]),
        "load": [round(x, 2) for x in os.getloadavg()],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--users", type=int, default=625_000)
    ap.add_argument("--checks", type=int, default=20)
    ap.add_argument("--every", type=int, default=30, help="seconds between checks")
    ap.add_argument("--spread", type=int, default=30, help="minutes the expiries span")
    ap.add_argument("--json", help="also write the results here")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="sessionize-lazy-expiry-") as tmp:
        out = run(Path(tmp) / "store", args.users, args.checks, args.every, args.spread)
    print(
        f"{out['users']:,} users: snapshot {out['file_bytes'] / 1e6:.1f} MB in "
        f"{out['row_groups']:,} row groups, key and expiry columns "
        f"{out['key_expiry_bytes'] / 1e6:.2f} MB"
    )
    print("check  due keys  MB read  groups read  check ms  commit ms  cache MB")
    for r in out["checks"]:
        print(
            f"{r['check']:5d}  {r['due']:8,d}  {r['bytes_read'] / 1e6:7.2f}  "
            f"{r['row_groups_read']:11,d}  {r['check_ms']:8.1f}  {r['commit_ms']:9.1f}  "
            f"{r['cache_nbytes'] / 1e6:8.1f}"
        )
    print(
        f"total read {out['bytes_read'] / 1e6:.2f} MB; first check {out['first_check_ms']} ms, "
        f"later checks {out['later_check_ms_median']} ms (median); load {out['load']}"
    )
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2) + "\n")


if __name__ == "__main__":
    main()
