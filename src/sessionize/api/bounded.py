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
from sessionize.schema import EVENT, SESSIONS, STATE

# A final watermark after every representable event time: all sessions are closed by it.
_END_OF_TIME_US = 2**62


def _sessions_task(rules: SessionRules, batches: Iterator[pa.RecordBatch]):
    received = list(batches)
    if not received:
        return
    events = pa.Table.from_batches(received)
    step = advance(
        STATE.empty_table(),
        events.cast(EVENT),
        rules=rules,
        watermark_before=None,
        watermark_after=_END_OF_TIME_US,
    )
    yield from step.sessions.cast(SESSIONS).to_batches()


def bounded_sessions(
    events: DataFrame,
    parser: Parser,
    rules: SessionRules,
    partitions: int,
    now_us: int,
    max_future_us: int | None,
) -> DataFrame:
    """The sessions of `events` (raw records for `parser`) with the columns of the
    `sessions` output; invalid rows are left out (`parser` tells which they are)."""
    now = F.timestamp_micros(F.lit(now_us))
    parsed = parser(events, now=now, max_future_us=max_future_us)
    valid = parsed.where(F.col("reason").isNull()).select(*EVENT.names)
    task = functools.partial(_sessions_task, rules)
    return valid.repartition(partitions, "user_id").mapInArrow(task, from_arrow_schema(SESSIONS))

