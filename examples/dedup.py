"""Drop events whose `event_id` was seen in the last N hours (event time).

The first event of an id is kept and opens a window of N hours; later events of that id
inside the window are dropped; the first one at or after its end is kept and opens the next
window. Each id's state row holds its window's start, and a timer at the window's end
removes it once the watermark passes (a window that ends before the watermark is never
stored): the state stays bounded by the ids of the last N hours (plus the lateness).

Events are judged in event-time order within a batch and in arrival order across batches,
so an event arriving after a later copy of its id (but not late) may be dropped.

On Spark, exactly once: `python -m examples.dedup --input events/ --output out/ --checkpoint
chk/ [--state URI]` streams JSON lines (`event_id`, `event_time`, `payload`) from a
directory, `kafka://...` or `kinesis://...` through `stateful.source`; a line that does not
fit goes to `out/invalid/` with its reason. In memory: `python -m examples.dedup [FILE ...]`,
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
HOUR_US = 3_600_000_000
EVENTS = pa.schema([("event_id", pa.string()), ("event_time", TS), ("payload", pa.string())])
SEEN = pa.schema(
    [pa.field("event_id", pa.string(), nullable=False), pa.field("window_start", TS, False)]
)


class Dedup(stateful.Processor):
    """Keep the first event of each `event_id` per window of `hours` hours."""

    key = "event_id"
    event_time = "event_time"
    state_schema = SEEN
    outputs = {"events": EVENTS}

    def __init__(self, hours: float = 24) -> None:
        self.ttl_us = int(hours * HOUR_US)
        if self.ttl_us <= 0:
            raise ValueError("hours must be positive")

    def params(self) -> dict[str, Any]:
        return {"ttl_us": self.ttl_us}

    def process(self, state: pa.Table, rows: pa.Table, ctx: stateful.Context) -> stateful.Update:
        ids = rows.column("event_id").combine_chunks()
        t = rows.column("event_time").cast(pa.int64()).to_numpy()
        group = pc.index_in(ids, value_set=ids.unique()).to_numpy()
        # each group's current window end: from the state, or none yet
        end = np.full(len(ids.unique()), np.iinfo(np.int64).min, np.int64)
        at = pc.index_in(state.column("event_id"), value_set=ids.unique())
        known = at.is_valid().to_numpy(zero_copy_only=False)
        starts = state.column("window_start").cast(pa.int64()).to_numpy()
        end[at.to_numpy(zero_copy_only=False)[known].astype(np.int64)] = starts[known] + self.ttl_us
        keep = np.zeros(len(t), bool)
        while True:  # one round per window opened in this batch (usually one)
            open_ = t >= end[group]
            if not open_.any():
                break
            groups, first = np.unique(group[open_], return_index=True)
            rows_at = np.flatnonzero(open_)[first]
            keep[rows_at] = True
            end[groups] = t[rows_at] + self.ttl_us
        kept = rows.filter(pa.array(keep))
        last = kept.group_by("event_id").aggregate([("event_time", "max")])
        opened = last.select(["event_id", "event_time_max"]).rename_columns(SEEN.names)
        opened = opened.cast(SEEN)
        # a window the watermark has passed needs no state: a later on-time copy is kept
        ends = pc.add(opened.column("window_start").cast(pa.int64()), self.ttl_us)
        wm = ctx.watermark_after
        new = opened if wm is None else opened.filter(pc.greater_equal(ends, wm))
        # stored ids leave when their window has ended (a timer fired) or a new window
        # that already ended replaces it
        ids = state.column("event_id")
        ended = pc.less(
            pc.add(starts, self.ttl_us), wm if wm is not None else np.iinfo(np.int64).min
        )
        renewed = pc.is_in(ids, value_set=opened.column("event_id"))
        gone = pc.and_(
            pc.or_(renewed, ended), pc.invert(pc.is_in(ids, value_set=new.column("event_id")))
        )
        timers = pa.table(
            {"event_id": new.column("event_id"),
             "at": pc.add(new.column("window_start").cast(pa.int64()), self.ttl_us)}
        )  # fmt: skip
        return stateful.Update(
            state=new,
            remove=ids.filter(gone),
            outputs={"events": kept.select(EVENTS.names).cast(EVENTS)},
            timers=timers,
            counters={"duplicates": rows.num_rows - kept.num_rows},
        )


def _at(hour: float) -> datetime:
    return datetime.fromtimestamp(hour * 3600, UTC)


SAMPLE = [
    pa.table({"event_id": ["a", "b", "a"], "event_time": [_at(0), _at(0.5), _at(1)],
              "payload": ["x", "y", "copy"]}, schema=EVENTS),
    pa.table({"event_id": ["a", "c"], "event_time": [_at(3), _at(3)],
              "payload": ["again, after 2 hours", "z"]}, schema=EVENTS),
]  # fmt: skip


# The JSON lines as Spark reads them (stateful.source): one without an event_id or an
# ISO-8601 event_time goes to the output `invalid`, with its reason.
SOURCE_SCHEMA = pa.schema(
    [pa.field("event_id", pa.string(), nullable=False), pa.field("event_time", TS, False),
     pa.field("payload", pa.string())]
)  # fmt: skip


def main() -> None:
    from examples import _batches

    _batches.main(__doc__.splitlines()[0], Dedup(hours=2), SAMPLE, EVENTS, SOURCE_SCHEMA)


if __name__ == "__main__":
    main()
