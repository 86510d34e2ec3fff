"""A batch's time with `--revise-within 3d` against no window, at the soak's rate, through
the files store (or PostgreSQL): what a partition task does per micro-batch, measured in one run.

    .venv/bin/python benchmarks/revision_cost.py [--days 3] [--batches 20] [--users 3000]
        [--state files | postgresql://...]

The soak's rate (benchmarks/soak.py's defaults): 200 events per 30-second batch from 3,000
users, the default attributes, a 30-minute gap. For each window (none, then `--days`), the
state of `--days` days of that traffic is built by the session processor in one step
(without a window the state keeps the open sessions only; with it, every session emitted
within the window too) and written to a files store in one version; then `--batches`
batches of the next 30 seconds each run as a partition task does (engines/partition.py):
open the previous version, read the batch users' rows and the due ones, `step`, remove and
put, commit. One partition holds every user (the soak has two: each would hold half).
Prints each window's median batch time and of it the step's (the logic; the rest is the
store: reading the users' rows, writing them and committing), the state rows a batch writes,
the state's rows and bytes, and the ratio.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
import uuid

import numpy as np
import pyarrow as pa
from revision_state import ATTRIBUTES

from sessionize import schema
from sessionize.config import SessionRules
from sessionize.core.declared import declared
from sessionize.core.keys import store_keys
from sessionize.core.step import step
from sessionize.logic.processor import SessionProcessor
from sessionize.state.registry import open_backend

SECOND = 1_000_000
BATCH_S = 30
T0 = 1_793_491_200_000_000  # 2026-11-01T00:00:00Z


def events(start: int, seconds: int, per_batch: int, users: int, rng) -> pa.Table:
    """`per_batch` events per 30 s from `start` for `seconds`, users drawn as the soak's."""
    n = per_batch * seconds // BATCH_S
    times = np.sort(start + rng.integers(0, seconds * SECOND, n))
    cols = {
        "user_id": pa.array(100_000 + rng.integers(0, users, n), pa.int64()),
        "event_time": pa.array(times, schema.TS),
        "page": pa.array(np.char.add("page ", rng.integers(0, 300, n).astype(str))),
        "action": pa.array(["view"] * n),
        **{k: pa.array([v] * n) for k, v in ATTRIBUTES.items()},
    }
    return pa.Table.from_pydict(cols).cast(schema.EVENT)


def run(
    state: str, window_us: int | None, days: float, batches: int, users: int, per_batch: int
) -> dict:
    rng = np.random.default_rng(7)
    rules = SessionRules(gap_us=30 * 60 * SECOND, lateness_us=0, revise_within_us=window_us)
    processor = SessionProcessor(rules)
    span = int(days * 86_400)
    history = events(T0, span, per_batch, users, rng)
    now = T0 + span * SECOND
    built = time.perf_counter()
    first = step(processor, None, history, batch_id=0, partition=0, watermark_before=None,
                 watermark_after=now)  # fmt: skip
    built = time.perf_counter() - built
    root = tempfile.mkdtemp(prefix="bench-revision-cost-")
    tag = f"bench_revision_{uuid.uuid4().hex[:8]}"
    uri = f"files:{root}" if state == "files" else f"{state}?schema={tag}"
    try:
        backend = open_backend(uri, declared(processor).rows)
        store = backend.open("cost", 0, -1)
        store.put_many(first.puts)
        store.commit(0)
        state_rows, state_bytes = first.puts.num_rows, first.puts.nbytes
        times, in_step, written = [], [], []
        for v in range(1, batches + 1):
            rows = events(now, BATCH_S, per_batch, users, rng)
            watermark = now + BATCH_S * SECOND
            took = time.perf_counter()
            store = backend.open("cost", 0, v - 1)
            keys = store_keys(rows["user_id"]).unique()
            keys = pa.concat_arrays([keys, pa.array(store.expiring(watermark), pa.int64())])
            handed = store.get_many(keys.unique())
            stepped = time.perf_counter()
            result = step(processor, handed, rows, batch_id=v,
                          partition=0, watermark_before=now, watermark_after=watermark)  # fmt: skip
            stepped = time.perf_counter() - stepped
            store.remove_many(result.removes)
            store.put_many(result.puts)
            store.commit(v)
            times.append(time.perf_counter() - took)
            in_step.append(stepped)
            written.append(result.puts.num_rows)
            now = watermark
    finally:
        shutil.rmtree(root, ignore_errors=True)
        if state != "files":
            import psycopg

            with psycopg.connect(state, autocommit=True) as conn:
                conn.execute(f'DROP SCHEMA IF EXISTS "{tag}" CASCADE')
    return {
        "median_s": statistics.median(times),
        "step_s": statistics.median(in_step),
        "rows_written": statistics.median(written),
        "max_s": max(times),
        "state_rows": state_rows,
        "state_mb": state_bytes / 1e6,
        "build_s": built,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--days", type=float, default=3.0)
    parser.add_argument("--batches", type=int, default=20)
    parser.add_argument("--users", type=int, default=3000)
    parser.add_argument("--events", type=int, default=200, help="events per 30 s batch")
    parser.add_argument(
        "--state", default="files", help="files (a temporary directory) or a postgresql:// URI"
    )
    args = parser.parse_args()
    found = {}
    for label, window in (("no window", None), (f"{args.days:g}-day window", args.days)):
        window_us = None if window is None else int(window * 86_400 * SECOND)
        found[label] = r = run(
            args.state, window_us, args.days, args.batches, args.users, args.events
        )
        print(
            f"{label}: batch median {r['median_s'] * 1000:.0f} ms (max "
            f"{r['max_s'] * 1000:.0f}; the step {r['step_s'] * 1000:.0f}, the store the "
            f"rest), {r['rows_written']:.0f} state rows written, state {r['state_rows']} rows, "
            f"{r['state_mb']:.1f} MB in memory (built in {r['build_s']:.1f} s)",
            flush=True,
        )
    none, window = found.values()
    print(f"ratio: {window['median_s'] / none['median_s']:.1f}x the batch time without a window")


if __name__ == "__main__":
    main()
