"""Page views of schema 3 (docs/concepts/sessions.md, "Page views and events").

A page view is an event whose action is one of `--page-view-actions`; the events after it
and before the next one (pings, clicks, purchases) fall in it. Per page view:

- `position`: its rank among the session's page views (1 = the landing page);
- `time_on_page_ms`: to the next page view; for the last one, its engaged time when it has
  pings, else null (the time to the session's close is no time on the page);
- `engaged_time_ms`: with `--ping-action`, Snowplow's formula (`dbt-snowplow-web`,
  `snowplow_web_pv_engaged_time.sql`): `heartbeat x (distinct floor(ping_time / heartbeat)
  over its pings - 1) + min_visit`, 0 without a ping; without one, the sum over its events
  of `min(next event - this, --max-page-time)` (the next event of the session; the last
  event's time to the close is not counted).

A session's `engaged_time_ms` is the sum of its page views'. Pure numpy, over the batch's
emitted sessions: `session` is each event's session and `starts` each session's first
event, events in order (a session's by time).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from sessionize.content import SessionContent

US_PER_MS = 1_000
NONE = -1


@dataclass(frozen=True)
class PageViews:
    """Per page view: `event` (index of its event), `session`, `position` (1-based),
    `time_on_page_ms` (NONE: null) and `engaged_ms`; per event: `view` (index of the page
    view it falls in, NONE before the session's first)."""

    event: np.ndarray
    session: np.ndarray
    position: np.ndarray
    time_on_page_ms: np.ndarray
    engaged_ms: np.ndarray
    view: np.ndarray


def page_views(
    time: np.ndarray,
    session: np.ndarray,
    starts: np.ndarray,
    is_view: np.ndarray,
    is_ping: np.ndarray | None,
    content: SessionContent,
) -> PageViews:
    """The page views of the sessions (see the module doc)."""
    n = len(time)
    event = np.flatnonzero(is_view)
    pv_session = session[event]
    first_pv = np.ones(len(event), dtype=bool)
    first_pv[1:] = pv_session[1:] != pv_session[:-1]
    heads = np.flatnonzero(first_pv)
    position = (np.arange(len(event)) - heads[np.cumsum(first_pv) - 1] + 1).astype(np.int32)
    # Each event's page view: the last page view at or before it, in its session.
    last_view = np.maximum.accumulate(np.where(is_view, np.cumsum(is_view) - 1, NONE))
    view = np.where(last_view >= 0, last_view, NONE) if n else last_view
    if len(event):
        same = np.zeros(n, dtype=bool)
        same[view >= 0] = pv_session[view[view >= 0]] == session[view >= 0]
        view = np.where(same, view, NONE)

    engaged_us = np.zeros(len(event), dtype=np.int64)
    has_pings = np.zeros(len(event), dtype=bool)
    if is_ping is not None:
        pinged = is_ping & (view >= 0)
        bucket = np.floor_divide(time[pinged], content.heartbeat_us)
        owner = view[pinged]
        if len(owner):
            # Events are in order, so (owner, bucket) pairs come sorted: a distinct pair
            # is one that differs from the pair before it (no sort needed).
            new = np.ones(len(owner), dtype=bool)
            new[1:] = (owner[1:] != owner[:-1]) | (bucket[1:] != bucket[:-1])
            count = np.bincount(owner[new], minlength=len(event))
            has_pings = count > 0
            engaged_us = np.where(
                has_pings, (count - 1) * content.heartbeat_us + content.min_visit_us, 0
            )
    else:
        same = session[1:] == session[:-1]
        step = np.minimum(np.diff(time), content.max_page_time_us)
        owner = view[:-1]
        counted = same & (owner >= 0)
        engaged_us = np.bincount(
            owner[counted], weights=step[counted], minlength=len(event)
        ).astype(np.int64)
    next_same = np.zeros(len(event), dtype=bool)
    next_same[:-1] = pv_session[1:] == pv_session[:-1]
    next_time = np.append(time[event][1:], 0) if len(event) else time[:0]
    on_page_ms = np.where(
        next_same,
        (next_time - time[event]) // US_PER_MS,
        np.where(has_pings, engaged_us // US_PER_MS, NONE),
    )
    return PageViews(
        event,
        pv_session,
        position,
        on_page_ms.astype(np.int64),
        (engaged_us // US_PER_MS).astype(np.int64),
        view,
    )


def per_session(values: np.ndarray, pv_session: np.ndarray, n_sessions: int) -> np.ndarray:
    """Per session, the sum of its page views' `values` (0 without one)."""
    return np.bincount(pv_session, weights=values, minlength=n_sessions).astype(np.int64)
