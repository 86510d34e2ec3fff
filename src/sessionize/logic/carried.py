"""What an emitted session carries from its events (docs/concepts/sessions.md): the `last:`
kept fields and, with schema 2, landing and exit pages, traffic source and channel,
engagement, counts and conversions, and `is_bot`; schema 3 adds page views, GA4's channel
group, click ids, the parsed user agent and sources kept across split sessions.

Every value comes from the session's own events (the traffic source and `is_bot` from its
first event only; with schema 3 the traffic source from its visit's first event, which the
state keeps as carry rows: continuation.py), which are all at hand when the session is
emitted, whether they arrived in one batch or came back from the state: so batch and
stream agree.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sessionize.content import SessionContent
from sessionize.logic import engagement
from sessionize.logic.agents import agent_columns
from sessionize.logic.bots import is_bot
from sessionize.logic.channel import channels, ga4_channels, rules_of
from sessionize.logic.conversions import conversion_columns, event_counts
from sessionize.logic.page_views import PageViews, page_views, per_session
from sessionize.logic.traffic import (
    QUERY_COLUMNS,
    click_id,
    normalize_hosts,
    per_distinct,
    traffic_columns,
)


def last_values(column: pa.Array, starts: np.ndarray, ends: np.ndarray) -> pa.Array:
    """Per session (events `starts[i]..ends[i]`), the last non-null value of `column`."""
    valid = pc.is_valid(column).to_numpy(zero_copy_only=False)
    where = np.where(valid, np.arange(len(column)), -1)
    last = np.maximum.reduceat(where, starts) if len(starts) else where[:0]
    found = last >= starts
    return column.take(pa.array(np.where(found, last, 0), mask=~found))


@dataclass(frozen=True)
class SessionRuns:
    """The events of the sessions being emitted: `events` are indices into `rows`, sorted
    by time, whose runs `starts[i]..ends[i]` are one session each; `time` the events'
    times in µs, `duration_ms` each session's duration."""

    rows: pa.Table
    events: np.ndarray
    time: np.ndarray
    starts: np.ndarray
    ends: np.ndarray
    duration_ms: np.ndarray

    @property
    def n(self) -> int:
        return len(self.starts)

    @cached_property
    def session(self) -> np.ndarray:
        """Each event's session, 0 to n - 1."""
        return np.repeat(np.arange(self.n), self.ends - self.starts + 1)

    def column(self, name: str) -> pa.Array:
        """Column `name` of the events, in their order."""
        return self.rows[name].take(pa.array(self.events)).combine_chunks()


def _action_is(actions: pa.Array, names) -> np.ndarray:
    """Per event, whether its action is one of `names` (judged per distinct action when
    `actions` come dictionary-encoded)."""
    value_set = pa.array(list(names), pa.string())
    if not pa.types.is_dictionary(actions.type):
        found = pc.is_in(actions, value_set=value_set)
        return pc.fill_null(found, False).to_numpy(zero_copy_only=False).astype(bool)
    distinct = pc.fill_null(pc.is_in(actions.dictionary, value_set=value_set), False)
    # A null action is none of them: its code is one past the distinct actions.
    per_code = np.append(distinct.to_numpy(zero_copy_only=False).astype(bool), False)
    return per_code[actions.indices.fill_null(len(distinct)).to_numpy(zero_copy_only=False)]


def _outcomes(
    runs: SessionRuns,
    actions: pa.Array,
    views: np.ndarray,
    engaged_ms: np.ndarray,
    content: SessionContent,
) -> tuple[list[pa.Array], list[pa.Array]]:
    """Per session, the columns from the page view count to `converted` (`views` page views,
    `engaged_ms` engaged time), and each conversion's count, value and first time."""
    per_conversion: list[pa.Array] = []
    converted = np.zeros(runs.n, dtype=bool)
    for c in content.conversions:
        values = None
        if c.value and c.value_column in runs.rows.column_names:
            values = runs.column(c.value_column)
        count, value, first_at = conversion_columns(
            _action_is(actions, [c.action]), values, runs.time, runs.session, runs.starts
        )
        converted |= count > 0
        per_conversion += [pa.array(count, pa.int64()), value, first_at]
    engaged = engagement.engaged(runs.duration_ms, views, converted, content.engaged_after_us)
    flags = [
        pa.array(views, pa.int64()),
        pa.array(engaged_ms, pa.int64()),
        pa.array(engaged, pa.bool_()),
        pa.array(~engaged, pa.bool_()),
        event_counts(actions, runs.session, runs.n),
        pa.array(converted, pa.bool_()),
    ]
    return flags, per_conversion


def content_columns(runs: SessionRuns, content: SessionContent) -> list[pa.Array]:
    """The columns of `schema.content_fields(content)`, in order, for the sessions of
    `runs`. Only the columns needed are taken, and the first event's fields from first
    events only."""
    rows, events, time, starts, ends = runs.rows, runs.events, runs.time, runs.starts, runs.ends
    n, n_events, session = runs.n, len(events), runs.session
    first_rows = pa.array(events[starts])

    def first_of(name: str) -> pa.Array:
        if name not in rows.column_names:
            return pa.nulls(n, pa.string())
        return rows[name].take(first_rows).combine_chunks()

    traffic = traffic_columns(
        first_of("url"), first_of("referrer"), normalize_hosts(content.site_hosts)
    )
    channel = channels(
        traffic["utm_source"],
        traffic["utm_medium"],
        traffic["gclid"],
        traffic["referrer_host"],
        rules_of(content.channel_rules),
    )
    actions = runs.column("action")
    views = engagement.page_view_count(_action_is(actions, content.page_view_actions), session, n)
    engaged_ms = engagement.engaged_time_ms(
        time,
        session,
        starts,
        max_page_time_us=content.max_page_time_us,
        is_ping=_action_is(actions, [content.ping_action]) if content.ping_action else None,
        heartbeat_us=content.heartbeat_us,
        min_visit_us=content.min_visit_us,
    )
    flags, per_conversion = _outcomes(runs, actions, views, engaged_ms, content)
    bots = is_bot(first_of("user_agent")) if n_events else np.zeros(0, dtype=bool)
    return [
        first_of("page"),
        rows["page"].take(pa.array(events[ends])).combine_chunks(),
        *(traffic[name] for name in QUERY_COLUMNS),
        traffic["referrer_host"],
        channel,
        *flags,
        *per_conversion,
        pa.array(bots, pa.bool_()),
    ]


def content_columns_3(
    runs: SessionRuns, content: SessionContent, visit: Visit
) -> tuple[list[pa.Array], PageViews]:
    """Schema 3's columns (`schema.content_fields(content, 3)`) of the sessions of `runs`,
    and their page views. `visit` gives each session's traffic row, click row and the
    session it continues (continuation.py)."""
    rows, events, time, starts = runs.rows, runs.events, runs.time, runs.starts
    n, session = runs.n, runs.session

    def at_rows(name: str, where: np.ndarray) -> pa.Array:
        if name not in rows.column_names:
            return pa.nulls(len(where), pa.string())
        found = where >= 0
        return rows[name].take(pa.array(np.maximum(where, 0), mask=~found)).combine_chunks()

    # Encoded once: each test of the actions below runs over the few distinct ones.
    actions = pc.dictionary_encode(runs.column("action"))
    is_view = _action_is(actions, content.page_view_actions)
    is_ping = _action_is(actions, [content.ping_action]) if content.ping_action else None
    views = page_views(time, session, starts, is_view, is_ping, content)
    pv_count = np.bincount(views.session, minlength=n).astype(np.int64)
    has_view = pv_count > 0
    first_pv = np.searchsorted(views.session, np.arange(n))
    last_pv = np.searchsorted(views.session, np.arange(n), side="right") - 1

    def page_of_view(view: np.ndarray) -> pa.Array:
        """Per session, the page of its page view `view` (null without page views): taken
        from the rows directly, not from every event's page."""
        if not len(views.event):
            return pa.nulls(n, pa.string())
        at = views.event[np.clip(view, 0, len(views.event) - 1)]
        return at_rows("page", np.where(has_view, np.asarray(events)[at], -1))

    landing, exit_ = page_of_view(first_pv), page_of_view(last_pv)
    landing_urls = at_rows("url", visit.traffic)
    traffic = traffic_columns(
        landing_urls, at_rows("referrer", visit.traffic), normalize_hosts(content.site_hosts)
    )
    click_type, click_value = per_distinct(at_rows("url", visit.click), click_id, 2)
    channel = ga4_channels(
        traffic["utm_source"],
        traffic["utm_medium"],
        traffic["utm_campaign"],
        traffic["referrer_host"],
        click_type_of_landing(landing_urls),
        traffic["gclid"],
        rules_of(content.channel_rules, 3),
    )
    engaged_ms = per_session(views.engaged_ms, views.session, n)
    flags, per_conversion = _outcomes(runs, actions, pv_count, engaged_ms, content)
    first_rows = np.asarray(events)[starts] if n else np.zeros(0, np.int64)
    agents = agent_columns(at_rows("user_agent", first_rows))
    bots = agents[3].to_numpy(zero_copy_only=False) == "bot" if n else np.zeros(0, bool)
    return [
        landing,
        exit_,
        *(traffic[name] for name in QUERY_COLUMNS),
        click_type,
        click_value,
        traffic["referrer_host"],
        channel,
        visit.continues,
        *flags,
        *agents,
        *per_conversion,
        pa.array(bots, pa.bool_()),
    ], views


def click_type_of_landing(urls: pa.Array) -> pa.Array:
    """The click id type of each landing URL (GA4's auto-tagging reads the landing's)."""
    return per_distinct(urls, click_id, 2)[0]


@dataclass(frozen=True)
class Visit:
    """Per chosen session: the row its traffic comes from, the row its click id comes
    from (-1: none), and the id of the session it continues (null: none)."""

    traffic: np.ndarray
    click: np.ndarray
    continues: pa.Array
