"""Time `advance` on a synthetic partition: python tests/logic/bench_advance.py [events] [state].

Not collected by pytest; prints the median of a few runs, of `advance` alone and of the
session engine's call (the keyed core's `step` running the SessionProcessor), and their
ratio. The data: ~10 events per user over one hour, 2% exact duplicates, 1% late, 1% close
actions, 50 distinct pages, plus state rows (open sessions from the previous hour) for a
tenth of the users.
"""

from __future__ import annotations

import statistics
import sys
import time

import numpy as np
import pyarrow as pa

from sessionize import schema
from sessionize.config import SessionRules
from sessionize.core.step import step
from sessionize.logic import advance
from sessionize.logic.processor import SessionProcessor

HOUR_US = 3_600_000_000
T0 = 1_570_000_000_000_000


def synthetic(n_events: int, n_state: int, seed: int = 7) -> tuple[pa.Table, pa.Table, int, int]:
    rng = np.random.default_rng(seed)
    n_users = max(1, n_events // 10)
    pages = np.array([f"category {i}" for i in range(50)], dtype=object)

    def table(n: int, t: np.ndarray, users: np.ndarray) -> pa.Table:
        action = np.where(rng.random(n) < 0.01, "browser_close", "view").astype(object)
        return pa.table(
            {
                "user_id": pa.array(users, pa.int64()),
                "event_time": pa.array(t, schema.TS),
                "page": pa.array(pages[rng.integers(0, len(pages), n)], pa.string()),
                "action": pa.array(action, pa.string()),
                "site": pa.array(np.full(n, "mysite.com", dtype=object), pa.string()),
                "api_version": pa.array(np.full(n, "v3", dtype=object), pa.string()),
                "browser": pa.array(np.full(n, "Firefox 53", dtype=object), pa.string()),
                "language": pa.array(np.full(n, "en", dtype=object), pa.string()),
                "device_type": pa.array(np.full(n, "tablet", dtype=object), pa.string()),
            },
            schema=schema.EVENT,
        )

    t = T0 + HOUR_US + rng.integers(0, HOUR_US, n_events)
    events = table(n_events, t, rng.integers(0, n_users, n_events))
    dup = rng.integers(0, n_events, n_events // 50)
    late = rng.integers(0, n_events, n_events // 100)
    late_events = events.take(pa.array(late)).set_column(
        1, schema.EVENT.field("event_time"), pa.array(t[late] - 2 * HOUR_US, schema.TS)
    )
    events = pa.concat_tables([events, events.take(pa.array(dup)), late_events])
    events = events.take(pa.array(rng.permutation(events.num_rows)))

    st_users = np.sort(rng.integers(0, n_users, n_state))
    st_t = T0 + HOUR_US - rng.integers(0, 5 * 60_000_000, n_state)
    state = table(n_state, st_t, st_users).append_column(
        "expires_at", pa.array(np.full(n_state, T0 + HOUR_US, np.int64), schema.TS)
    )
    return state, events, T0 + HOUR_US - 10 * 60_000_000, T0 + 2 * HOUR_US - 10 * 60_000_000


def main() -> None:
    n_events = int(sys.argv[1]) if len(sys.argv) > 1 else 500_000
    n_state = int(sys.argv[2]) if len(sys.argv) > 2 else 50_000
    state, events, wm_before, wm_after = synthetic(n_events, n_state)
    rules = SessionRules()
    processor = SessionProcessor(rules)

    def alone():
        return advance(
            state, events, rules=rules, watermark_before=wm_before, watermark_after=wm_after
        ).stats

    def on_core():
        return step(
            processor,
            state,
            events,
            batch_id=1,
            partition=0,
            watermark_before=wm_before,
            watermark_after=wm_after,
        ).counters

    medians = {}
    for name, call in (("advance", alone), ("step(SessionProcessor)", on_core)):
        wall, cpu = [], []
        for _ in range(5):
            start, start_cpu = time.perf_counter(), time.process_time()
            result = call()
            wall.append(time.perf_counter() - start)
            cpu.append(time.process_time() - start_cpu)
        medians[name] = statistics.median(wall)
        print(f"events={events.num_rows} state_rows={state.num_rows} {result}")
        print(
            f"{name}: wall median {statistics.median(wall):.3f}s min {min(wall):.3f}s; "
            f"cpu median {statistics.median(cpu):.3f}s"
        )
    print(f"step / advance: {medians['step(SessionProcessor)'] / medians['advance']:.2f}x")


if __name__ == "__main__":
    main()
