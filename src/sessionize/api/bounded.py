"""A complete, bounded set of events -> its sessions, in one pass and without state.

Every user's events meet in one task (a shuffle by user), where `logic.advance` runs once
with no state, no watermark to be late against, and a final watermark past every event:
so every session is closed and emitted, exactly as the stream would emit it once the
watermark has passed it (docs/design.md, "Semantics"). The result holds the invalid rows
beside the sessions and page views: nothing is dropped without a trace.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Iterator
from dataclasses import dataclass

import pyarrow as pa
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import from_arrow_schema

from sessionize.base_schema import STITCHED_USER_ID
from sessionize.config import SessionRules
from sessionize.core.step import step
from sessionize.engines.runner import Parser
from sessionize.logic import advance
from sessionize.logic.processor import SessionProcessor
from sessionize.mapping import EventMapping
from sessionize.schema import INVALID_EVENTS, Layout, layout

# A final watermark after every representable event time: all sessions are closed by it.
_END_OF_TIME_US = 2**62


@dataclass(frozen=True)
class SessionsResult:
    """What `Sessionizer.sessions` gives: lazy DataFrames of one bounded input.

    Attributes:
        sessions: the sessions, with the columns of the `sessions` output (no `batch_id`).
        page_views: their page views, with the columns of `page_views` (before schema 3:
            every event of those sessions).
        invalid: the rows that are not events, with the columns of `invalid_events`
            (`raw`, `reason`, `source`).
        events: every event of those sessions, with the columns of `events` (schema 3;
            None before).

    Example:
        >>> result = Sessionizer(user="anonymous_id", time="ts").sessions(df)
        >>> result.sessions.count(), result.invalid.count()
    """

    sessions: DataFrame
    page_views: DataFrame
    invalid: DataFrame
    events: DataFrame | None = None

    def __getattr__(self, name: str):
        # `sessions()` returned the sessions DataFrame itself before: say where it went.
        if hasattr(DataFrame, name):
            raise AttributeError(
                f"SessionsResult has no attribute {name!r}: sessions() returns a "
                f"SessionsResult; the sessions DataFrame is its .sessions ({name!r} is there)"
            )
        raise AttributeError(f"SessionsResult has no attribute {name!r}")


def _emitted_task(rules: SessionRules, lay: Layout, output: str, batches: Iterator[pa.RecordBatch]):
    received = list(batches)
    if not received:
        return
    events = pa.Table.from_batches(received)
    if lay.identity:  # the identity rows and columns are the processor's (logic/processor.py)
        done = step(
            SessionProcessor(rules, lay),
            None,
            events.cast(lay.event),
            batch_id=0,
            partition=0,
            watermark_before=None,
            watermark_after=_END_OF_TIME_US,
        )
        # With identity the sessions are numbered per stitched user next (`_numbered_task`).
        target = lay.sessions if output == "sessions" else lay.outputs[output]
        yield from done.outputs[output].cast(target).to_batches()
        return
    result = advance(
        lay.state.empty_table(),
        events.cast(lay.event),
        rules=rules,
        watermark_before=None,
        watermark_after=_END_OF_TIME_US,
        layout=lay,
    )
    emitted = {
        "sessions": result.sessions,
        "page_views": result.page_views,
        "events": result.events,
    }[output]
    yield from emitted.cast(lay.outputs[output]).to_batches()


def _numbered_task(rules: SessionRules, lay: Layout, batches: Iterator[pa.RecordBatch]):
    """A stitched user's sessions, all in one task: numbered and attributed by the session
    processor's follow-on (logic/users.py), from no state, as one batch."""
    received = list(batches)
    if not received:
        return
    then = SessionProcessor(rules, lay).follow_on
    assert then is not None  # with identity
    done = step(
        then.processor,
        None,
        pa.Table.from_batches(received).cast(lay.sessions),
        batch_id=0,
        partition=0,
        watermark_before=None,
        watermark_after=_END_OF_TIME_US,
    )
    yield from done.outputs["sessions"].cast(lay.numbered_sessions).to_batches()


def bounded_sessions(
    events: DataFrame,
    parser: Parser,
    rules: SessionRules,
    partitions: int,
    now_us: int,
    max_future_us: int | None,
    mapping: EventMapping,
) -> SessionsResult:
    """The sessions, page views, invalid rows and (schema 3) events of `events` (raw
    records for `parser`).
    Each DataFrame is computed when it is used (the sessions and the page views each run
    the session logic once over the valid events)."""
    parsed = parser(events, now=now_us, max_future_us=max_future_us)
    lay = layout(mapping)
    # One batch of every event: none is behind a watermark, so a window revises nothing
    # (and with identity the users step then takes the first step's `sessions`).
    rules = dataclasses.replace(rules, revise_within_us=None)
    valid = parsed.where(F.col("reason").isNull()).select(*lay.event.names)
    by_user = valid.repartition(partitions, "user_id")

    def emitted(output: str) -> DataFrame:
        task = functools.partial(_emitted_task, rules, lay, output)
        if not (lay.identity and output == "sessions"):
            return by_user.mapInArrow(task, from_arrow_schema(lay.outputs[output]))
        sessions = by_user.mapInArrow(task, from_arrow_schema(lay.sessions))
        by_stitched = sessions.repartition(partitions, STITCHED_USER_ID)
        numbered = functools.partial(_numbered_task, rules, lay)
        return by_stitched.mapInArrow(numbered, from_arrow_schema(lay.numbered_sessions))

    invalid = parsed.where(F.col("reason").isNotNull()).select(*INVALID_EVENTS.names)
    events_out = emitted("events") if "events" in lay.outputs else None
    return SessionsResult(emitted("sessions"), emitted("page_views"), invalid, events_out)
