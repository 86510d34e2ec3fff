"""What an emitted session carries from its events (docs/concepts/sessions.md): the `last:`
kept fields and, with schema 2, landing and exit pages, traffic source and channel,
engagement, counts and conversions, and `is_bot`.

Every value comes from the session's own events (the traffic source and `is_bot` from its
first event only), which are all at hand when the session is emitted, whether they arrived
in one batch or came back from the state: so batch and stream agree.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sessionize.content import SessionContent
from sessionize.logic import engagement
from sessionize.logic.bots import is_bot
from sessionize.logic.channel import channels, rules_of
from sessionize.logic.conversions import conversion_columns, event_counts
from sessionize.logic.traffic import QUERY_COLUMNS, normalize_hosts, traffic_columns


def last_values(column: pa.Array, starts: np.ndarray, ends: np.ndarray) -> pa.Array:
    """Per session (events `starts[i]..ends[i]`), the last non-null value of `column`."""
    valid = pc.is_valid(column).to_numpy(zero_copy_only=False)
    where = np.where(valid, np.arange(len(column)), -1)
    last = np.maximum.reduceat(where, starts) if len(starts) else where[:0]
    found = last >= starts
    return column.take(pa.array(np.where(found, last, 0), mask=~found))


def content_columns(
    rows: pa.Table, events: np.ndarray, time: np.ndarray, starts: np.ndarray,
    ends: np.ndarray, duration_ms: np.ndarray, content: SessionContent,
) -> list[pa.Array]:  # fmt: skip
    """The columns of `schema.content_fields(content)`, in order, for the sessions whose
    events are the runs `starts[i]..ends[i]` of `events` (indices into `rows`, sorted by
    time); `time` in µs. Only the columns needed are taken, and the first event's fields
    from first events only."""
    n, n_events = len(starts), len(events)
    session = np.repeat(np.arange(n), ends - starts + 1)
    first_rows = pa.array(events[starts])

    def column(name: str) -> pa.Array:
        return rows[name].take(pa.array(events)).combine_chunks()

    def first_of(name: str) -> pa.Array:
        if name not in rows.column_names:
            return pa.nulls(n, pa.string())
        return rows[name].take(first_rows).combine_chunks()

    traffic = traffic_columns(
        first_of("url"), first_of("referrer"), normalize_hosts(content.site_hosts)
    )
    channel = channels(
        traffic["utm_source"], traffic["utm_medium"], traffic["gclid"],
        traffic["referrer_host"], rules_of(content.channel_rules),
    )  # fmt: skip
    actions = column("action")

    def action_is(names) -> np.ndarray:
        found = pc.is_in(actions, value_set=pa.array(list(names), pa.string()))
        return pc.fill_null(found, False).to_numpy(zero_copy_only=False).astype(bool)

    views = engagement.page_view_count(action_is(content.page_view_actions), session, n)
    engaged_ms = engagement.engaged_time_ms(
        time, session, starts, max_page_time_us=content.max_page_time_us,
        is_ping=action_is([content.ping_action]) if content.ping_action else None,
        heartbeat_us=content.heartbeat_us, min_visit_us=content.min_visit_us,
    )  # fmt: skip
    per_conversion: list[pa.Array] = []
    converted = np.zeros(n, dtype=bool)
    for c in content.conversions:
        values = None
        if c.value and c.value_column in rows.column_names:
            values = column(c.value_column)
        count, value, first_at = conversion_columns(
            action_is([c.action]), values, time, session, starts
        )
        converted |= count > 0
        per_conversion += [pa.array(count, pa.int64()), value, first_at]
    engaged = engagement.engaged(duration_ms, views, converted, content.engaged_after_us)
    bots = is_bot(first_of("user_agent")) if n_events else np.zeros(0, dtype=bool)
    return [
        first_of("page"),
        rows["page"].take(pa.array(events[ends])).combine_chunks(),
        *(traffic[name] for name in QUERY_COLUMNS),
        traffic["referrer_host"],
        channel,
        pa.array(views, pa.int64()),
        pa.array(engaged_ms, pa.int64()),
        pa.array(engaged, pa.bool_()),
        pa.array(~engaged, pa.bool_()),
        event_counts(actions, session, n),
        pa.array(converted, pa.bool_()),
        *per_conversion,
        pa.array(bots, pa.bool_()),
    ]
