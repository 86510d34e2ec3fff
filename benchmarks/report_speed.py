"""Time `build_report` on a large output written directly with pyarrow (no Spark run).

    python benchmarks/report_speed.py --sessions 1000000 [--dir /tmp/report-speed]

Writes SESSIONS sessions (about 5 page views each, in 24 hourly batches), their page views,
a few late and invalid events and a progress log in the layout of the sink, then prints the
time to read, aggregate and draw the report, and the HTML size.
"""

from __future__ import annotations

import argparse
import json
import shutil
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from sessionize.schema import INVALID_EVENTS, LATE_EVENTS, PAGE_VIEWS, SESSIONS

T0 = 1_793_491_200_000_000  # 2026-11-01T00:00Z in µs
HOUR = 3_600_000_000
PAGES = (
    ["home", "cart", "checkout", "about", "contact"]
    + [f"category {i}" for i in range(40)]
    + [f"article {i}" for i in range(400)]
)
BATCHES = 24


def sessions_table(rng: np.random.Generator, n: int) -> tuple[pa.Table, pa.Table]:
    """n sessions over 24 hours and their page views (vectorized, no loop per row)."""
    counts = np.minimum(rng.geometric(0.2, n), 200).astype(np.int64)
    start = T0 + rng.integers(0, BATCHES * HOUR, n)
    total = int(counts.sum())
    offsets = np.concatenate([[0], np.cumsum(counts)])
    owner = np.repeat(np.arange(n), counts)
    position = np.arange(total) - offsets[owner]
    think = rng.exponential(60e6, total).astype(np.int64) * (position > 0)
    # Each session's event times: its start plus the running sum of its think times.
    run = np.cumsum(think)
    event_time = start[owner] + run - run[offsets[owner]]
    end = event_time[offsets[1:] - 1]
    code = np.minimum(rng.zipf(1.6, total) - 1, len(PAGES) - 1).astype(np.int32)
    page = pa.DictionaryArray.from_arrays(code, pa.array(PAGES)).cast(pa.string())
    ids = pa.array(np.char.add("s", np.arange(n).astype(str)))
    pages = pa.ListArray.from_arrays(pa.array(offsets, pa.int32()), page)
    explicit = rng.random(n) < 0.1
    sessions = pa.table(
        {
            "session_id": ids,
            "user_id": rng.integers(0, n // 3, n),
            "start_time": pa.array(start, pa.timestamp("us", tz="UTC")),
            "end_time": pa.array(end, pa.timestamp("us", tz="UTC")),
            "closed_at": pa.array(end + 600_000_000, pa.timestamp("us", tz="UTC")),
            "duration_ms": (end - start) // 1000,
            "event_count": counts,
            "pages": pages,
            "end_reason": np.where(explicit, "explicit", "inactivity"),
            **{
                c: pa.nulls(n, pa.string())
                for c in ("site", "api_version", "browser", "language", "device_type")
            },
        }
    ).cast(pa.schema([f for f in SESSIONS if f.name != "session_date"]))
    views = pa.table(
        {
            "session_id": ids.take(pa.array(owner)),
            "user_id": sessions["user_id"].take(pa.array(owner)),
            "event_time": pa.array(event_time, pa.timestamp("us", tz="UTC")),
            "page": page,
            "position": (position + 1).astype(np.int32),
            "time_on_page_ms": think // 1000,
        },
        schema=PAGE_VIEWS,
    )
    return sessions, views


def write_outputs(root: Path, sessions: pa.Table, views: pa.Table, rng) -> None:
    batch_of = (pc.cast(sessions["start_time"], pa.int64()).to_numpy() - T0) // HOUR
    view_batch = (pc.cast(views["event_time"], pa.int64()).to_numpy() - T0) // HOUR
    for b in range(BATCHES):
        part = sessions.filter(pa.array(batch_of == b))
        path = root / "sessions" / f"batch_id={b}" / "session_date=2026-11-01"
        path.mkdir(parents=True)
        pq.write_table(part, path / "part-00000.parquet")
        path = root / "page_views" / f"batch_id={b}"
        path.mkdir(parents=True)
        pq.write_table(views.filter(pa.array(view_batch == b)), path / "part-00000.parquet")
        k = int(rng.integers(0, 200))
        late = pa.table({f.name: pa.nulls(k, f.type) for f in LATE_EVENTS})  # only counted
        path = root / "late_events" / f"batch_id={b}"
        path.mkdir(parents=True)
        pq.write_table(late, path / "part-00000.parquet")
        k = int(rng.integers(0, 100))
        reasons = rng.choice(["not a JSON object", "missing user_id", "missing page.current"], k)
        invalid = pa.table(
            {"raw": ["x"] * k, "reason": reasons, "source": ["f"] * k}, schema=INVALID_EVENTS
        )
        path = root / "invalid_events" / f"batch_id={b}"
        path.mkdir(parents=True)
        pq.write_table(invalid, path / "part-00000.parquet")
    at = datetime(2026, 11, 22, tzinfo=UTC)
    with open(root / "_progress.jsonl", "w") as f:
        for b in range(BATCHES):
            batch = {
                "records": int((view_batch == b).sum()),
                "open_sessions": 5000 + b,
                "state_bytes_read": 10**7,
                "state_bytes_written": 2 * 10**7,
            }
            row = {
                "version": b,
                "watermark": None,
                "batch": batch,
                "totals": {},
                "duration_s": 30.0,
                "committed_at": (at + b * timedelta(minutes=1)).isoformat(),
            }
            f.write(json.dumps(row) + "\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sessions", type=int, default=1_000_000)
    ap.add_argument("--dir", default="/tmp/sessionize-report-speed")
    args = ap.parse_args()
    root = Path(args.dir)
    shutil.rmtree(root, ignore_errors=True)
    t = time.perf_counter()
    rng = np.random.default_rng(1)
    sessions, views = sessions_table(rng, args.sessions)
    write_outputs(root / "out", sessions, views, rng)
    print(
        f"wrote {sessions.num_rows:,} sessions, {views.num_rows:,} page views "
        f"in {time.perf_counter() - t:.1f}s"
    )

    import matplotlib  # noqa: F401 - imported before timing: a one-off cost of any process

    from sessionize.report import build_report
    from sessionize.report.data import load_outputs

    # CPU seconds (all threads) too: wall time on a shared machine says little alone.
    t, cpu = time.perf_counter(), time.process_time()
    load_outputs(str(root / "out"))
    read, read_cpu = time.perf_counter() - t, time.process_time() - cpu
    cpu = time.process_time()
    result = build_report(str(root / "out"), str(root / "report.html"))
    total_cpu = time.process_time() - cpu
    print(
        f"read and aggregate: {read:.2f}s ({read_cpu:.2f} CPU s); whole report: "
        f"{result.seconds:.2f}s ({total_cpu:.2f} CPU s) for {result.sessions:,} sessions, "
        f"{result.bytes / 1e3:,.0f} kB"
    )
    print(f"report: {result.path}")


if __name__ == "__main__":
    main()
