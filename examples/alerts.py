"""An alert when a user has at least N failed logins within 10 minutes (event time).

A failure raises an alert when it brings the user's failures in the window ending at it
(the failures less than `window` before it, itself included) to exactly N: one alert per
crossing of the threshold, not one per failure above it. Each user's state rows are its
failures that can still count for an on-time login (newer than the watermark minus the
window); a timer at the newest one's time plus the window removes them once it has passed.

Logins are judged in event-time order within a batch and in arrival order across batches.

On Spark, exactly once: `python -m examples.alerts --input logins/ --output out/
--checkpoint chk/ [--state URI]` streams JSON lines (`user`, `event_time`, `outcome`) from a
directory, `kafka://...` or `kinesis://...` through `stateful.source`; a line that does not
fit goes to `out/invalid/` with its reason. In memory: `python -m examples.alerts [FILE ...]`,
one micro-batch per file, or a sample.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sessionize import stateful

TS = pa.timestamp("us", tz="UTC")
MINUTE_US = 60_000_000
LOGINS = pa.schema([("user", pa.string()), ("event_time", TS), ("outcome", pa.string())])
FAILURES = pa.schema(
    [pa.field("user", pa.string(), nullable=False), pa.field("failed_at", TS, nullable=False)]
)
ALERTS = pa.schema(
    [
        pa.field("user", pa.string(), nullable=False),
        pa.field("alert_time", TS, nullable=False),  # the failure that reached N
        pa.field("first_failure", TS, nullable=False),  # the oldest of the N in the window
    ]
)


class FailedLoginAlerts(stateful.Processor):
    """Alert when a user's failed logins within `window_minutes` reach `failures`."""

    key = "user"
    event_time = "event_time"
    state_schema = FAILURES
    outputs = {"alerts": ALERTS}

    def __init__(self, failures: int = 3, window_minutes: float = 10) -> None:
        if failures < 1 or window_minutes <= 0:
            raise ValueError("failures must be >= 1 and window_minutes > 0")
        self.failures = failures
        self.window_us = int(window_minutes * MINUTE_US)

    def params(self) -> dict[str, Any]:
        return {"failures": self.failures, "window_us": self.window_us}

    def process(self, state: pa.Table, rows: pa.Table, ctx: stateful.Context) -> stateful.Update:
        new = rows.filter(pc.equal(rows.column("outcome"), "failure"))
        users = pa.concat_arrays(
            [state.column("user").combine_chunks(), new.column("user").combine_chunks()]
        )
        times = np.concatenate(
            [state.column("failed_at").cast(pa.int64()).to_numpy(),
             new.column("event_time").cast(pa.int64()).to_numpy()]
        )  # fmt: skip
        is_new = np.arange(len(times)) >= state.num_rows
        # (user, time) order, stored failures before new ones at equal times
        group = pc.index_in(users, value_set=users.unique()).to_numpy()
        order = np.lexsort((is_new, times, group))
        group, times, is_new = group[order], times[order], is_new[order]
        # the first failure of the same user inside each one's window, by binary search
        # over (group, rank of time): ranks keep the composite key small
        ranks = np.unique(times)
        width = len(ranks) + 1
        composite = group * width + np.searchsorted(ranks, times)
        lowest = group * width + np.searchsorted(ranks, times - self.window_us, side="right")
        first = np.searchsorted(composite, lowest, side="left")
        count = np.arange(len(times)) - first + 1
        hit = is_new & (count == self.failures)
        user_sorted = users.take(pa.array(order))
        alerts = pa.table(
            {"user": user_sorted.filter(pa.array(hit)),
             "alert_time": pa.array(times[hit]).cast(TS),
             "first_failure": pa.array(times[first[hit]]).cast(TS)}
        ).cast(ALERTS)  # fmt: skip
        # keep the failures that can still count for an on-time login
        horizon = ctx.watermark_after - self.window_us if ctx.watermark_after is not None else None
        live = np.ones(len(times), bool) if horizon is None else times > horizon
        kept = pa.table(
            {"user": user_sorted.filter(pa.array(live)),
             "failed_at": pa.array(times[live]).cast(TS)}
        ).cast(FAILURES)  # fmt: skip
        newest = kept.group_by("user").aggregate([("failed_at", "max")])
        timers = pa.table(
            {"user": newest.column("user"),
             "at": pc.add(newest.column("failed_at_max").cast(pa.int64()), self.window_us)}
        )  # fmt: skip
        had = state.column("user").unique()
        return stateful.Update(
            state=kept,
            remove=had.filter(pc.invert(pc.is_in(had, value_set=kept.column("user")))),
            outputs={"alerts": alerts},
            timers=timers,
            counters={"failures": new.num_rows, "alerts": alerts.num_rows},
        )


def _at(minute: float) -> datetime:
    return datetime.fromtimestamp(minute * 60, UTC)


SAMPLE = [
    pa.table({"user": ["ann", "bob", "ann"], "event_time": [_at(0), _at(1), _at(4)],
              "outcome": ["failure", "success", "failure"]}, schema=LOGINS),
    pa.table({"user": ["ann", "bob"], "event_time": [_at(9), _at(30)],
              "outcome": ["failure", "failure"]}, schema=LOGINS),
]  # fmt: skip


# The JSON lines as Spark reads them (stateful.source): one without a user or an ISO-8601
# event_time goes to the output `invalid`, with its reason.
SOURCE_SCHEMA = pa.schema(
    [pa.field("user", pa.string(), nullable=False), pa.field("event_time", TS, False),
     pa.field("outcome", pa.string())]
)  # fmt: skip


def main() -> None:
    from examples import _batches

    processor = FailedLoginAlerts(failures=3)
    _batches.main(__doc__.splitlines()[0], processor, SAMPLE, LOGINS, SOURCE_SCHEMA)


if __name__ == "__main__":
    main()
