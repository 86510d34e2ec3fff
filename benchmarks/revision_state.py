"""What `--revise-within` keeps in the state: bytes per kept session, and the batches' time.

    .venv/bin/python benchmarks/revision_state.py [--users 20000] [--events 5]

Through the keyed core's `run_local` and the session processor, one partition, without
Spark: `--users` users with one session of `--events` events each (the default
attributes set), then a batch whose watermark emits them all, then the next `--users`
users' sessions. Without a window the first sessions leave the state when emitted; with a
3-day window they stay. Prints, per window, the kept state rows' bytes per session as the
files store writes them (Parquet, zstd) and in memory, and the three batches' time.
"""

from __future__ import annotations

import argparse
import random
import time

import pyarrow as pa
import pyarrow.compute as pc

from sessionize import schema
from sessionize.config import SessionRules
from sessionize.core.local import run_local
from sessionize.logic.processor import SessionProcessor
from sessionize.state.codec import to_parquet

MIN = 60_000_000
T0 = 1_570_719_600_000_000  # 2019-10-10T15:00:00Z
FLUSH_USER = 10**12
ATTRIBUTES = {
    "site": "mysite.com",
    "api_version": "v3",
    "browser": "Firefox 53",
    "language": "en",
    "device_type": "tablet",
}


def sessions(users: range, events: int, start: int, rnd: random.Random) -> pa.Table:
    rows = [
        {
            "user_id": u,
            "event_time": start + i * MIN + rnd.randrange(MIN),
            "page": f"page {rnd.randrange(300)}",
            "action": "view",
            **ATTRIBUTES,
        }
        for u in users
        for i in range(events)
    ]
    return pa.Table.from_pylist(rows, schema.EVENT)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--users", type=int, default=20_000)
    parser.add_argument("--events", type=int, default=5)
    args = parser.parse_args()
    rnd = random.Random(1)
    first = sessions(range(1, args.users + 1), args.events, T0, rnd)
    flush = pa.Table.from_pylist(
        [{"user_id": FLUSH_USER, "event_time": T0 + 40 * MIN, "page": "x", "action": "view"}],
        schema.EVENT,
    )
    second = sessions(range(args.users + 1, 2 * args.users + 1), args.events, T0 + 60 * MIN, rnd)
    for label, window in (("no window", None), ("3-day window", 3 * 24 * 60 * MIN)):
        rules = SessionRules(gap_us=10 * MIN, lateness_us=0, revise_within_us=window)
        processor = SessionProcessor(rules)
        took = time.perf_counter()
        run = run_local(processor, [first, flush, second])
        took = time.perf_counter() - took
        state = run.state
        kept = state.filter(pc.less_equal(state["user_id"], args.users))
        per = (lambda n: round(n / args.users)) if kept.num_rows else (lambda n: 0)
        print(
            f"{label}: kept rows {kept.num_rows}, bytes per kept session "
            f"{per(len(to_parquet(kept)))} (Parquet zstd), {per(kept.nbytes)} (in memory); "
            f"3 batches {took:.2f} s"
        )


if __name__ == "__main__":
    main()
