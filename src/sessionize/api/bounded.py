"""A complete, bounded set of events -> its sessions, in one pass and without state.

Every user's events meet in one task (a shuffle by user), where `logic.advance` runs once
with no state, no watermark to be late against, and a final watermark past every event:
so every session is closed and emitted, exactly as the stream would emit it once the
watermark has passed it (docs/design.md, "Semantics").
"""

from __future__ import annotations

import functools
from collections.abc import Iterator

import pyarrow as pa
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import from_arrow_schema

from sessionize.config import SessionRules
from sessionize.engines.runner import Parser
from sessionize.logic import advance
from sessionize.mapping import EventMapping
from sessionize.schema import Layout, layout

# A final watermark after every representable event time: all sessions are closed by it.
_END_OF_TIME_US = 2**62


def _sessions_task(rules: SessionRules, lay: Layout, batches: Iterator[pa.RecordBatch]):
    received = list(batches)
    if not received:
        return
    events = pa.Table.from_batches(received)
    step = advance(
        lay.state.empty_table(),
        events.cast(lay.event),
        rules=rules,
        watermark_before=None,
        watermark_after=_END_OF_TIME_US,
        layout=lay,
    )
    yield from step.sessions.cast(lay.sessions).to_batches()


def bounded_sessions(
    events: DataFrame,
    parser: Parser,
    rules: SessionRules,
    partitions: int,
    now_us: int,
    max_future_us: int | None,
    mapping: EventMapping,
) -> DataFrame:
    """The sessions of `events` (raw records for `parser`) with the columns of the
    `sessions` output; invalid rows are left out (`parser` tells which they are)."""
    parsed = parser(events, now=now_us, max_future_us=max_future_us)
    lay = layout(mapping)
    valid = parsed.where(F.col("reason").isNull()).select(*lay.event.names)
    task = functools.partial(_sessions_task, rules, lay)
    return valid.repartition(partitions, "user_id").mapInArrow(
        task, from_arrow_schema(lay.sessions)
    )

