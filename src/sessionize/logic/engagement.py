"""How engaged a session was: page views, engaged time, `engaged` and `bounce`.

- `page_view_count`: the session's events whose action is a page view action.
- `engaged_time_ms`: without a ping action, the sum over consecutive events of
  `min(next - this, max_page_time)` (the last event's time to `closed_at` is not counted);
  with one, `heartbeat x` the number of distinct heartbeat periods
  `floor((ping_time - start_time) / heartbeat)` holding a ping, plus `min_visit`, when the
  session has a ping (else 0). Pings are ordinary events for every other column.
- `engaged`: the session lasts `engaged_after` or more (`duration_ms`, first to last
  event), or has 2 page views or more, or a conversion; `bounce` is its negation.

All vectorized over the batch's emitted sessions (numpy), with `session` the index of
each event's session and `starts` each session's first event.
"""

from __future__ import annotations

import numpy as np

US_PER_MS = 1_000


def page_view_count(is_view: np.ndarray, session: np.ndarray, n_sessions: int) -> np.ndarray:
    """Per session, the number of its events that are page views."""
    return np.bincount(session[is_view], minlength=n_sessions).astype(np.int64)


def engaged_time_ms(
    time: np.ndarray,
    session: np.ndarray,
    starts: np.ndarray,
    *,
    max_page_time_us: int,
    is_ping: np.ndarray | None = None,
    heartbeat_us: int = 10_000_000,
    min_visit_us: int = 5_000_000,
) -> np.ndarray:
    """Per session, its engaged time in ms (see the module doc; `time` in µs)."""
    n = len(starts)
    if is_ping is None:
        same = session[1:] == session[:-1]
        step = np.minimum(np.diff(time), max_page_time_us)[same]
        total = np.bincount(session[:-1][same], weights=step, minlength=n)
        # Sums of whole µs stay exact in a float64 up to 2**53 µs (285 years).
        return (total.astype(np.int64) // US_PER_MS).astype(np.int64)
    period = ((time - time[starts][session]) // heartbeat_us)[is_ping]
    width = int(period.max()) + 1 if len(period) else 1
    pairs = np.unique(session[is_ping] * width + period)  # one per (session, period)
    periods = np.bincount(pairs // width, minlength=n).astype(np.int64)
    us = np.where(periods > 0, periods * heartbeat_us + min_visit_us, 0)
    return (us // US_PER_MS).astype(np.int64)


def engaged(
    duration_ms: np.ndarray,
    page_views: np.ndarray,
    converted: np.ndarray,
    engaged_after_us: int,
) -> np.ndarray:
    """Per session, whether it was engaged (`bounce` is the negation)."""
    return (duration_ms * US_PER_MS >= engaged_after_us) | (page_views >= 2) | converted
