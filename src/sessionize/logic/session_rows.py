"""The rows of sessions cut by `sessions.advance`: SESSIONS and PAGE_VIEWS of the emitted
ones, and OPEN_SESSIONS rows of those the state still holds (`--open-sessions`).

An open session's row has the columns its `sessions` row will have, as known so far (its
events may still grow it, and `closed_at` is the moment the rules give now), plus
`expires_at`: the release after which the watermark emits it unless new events extend it.
Pure and vectorized, like the rest of the logic.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sessionize import schema
from sessionize.logic.boundaries import END_REASONS, US_PER_MS
from sessionize.logic.carried import (
    SessionRuns,
    Visit,
    content_columns,
    content_columns_3,
    last_values,
)
from sessionize.logic.ids import session_ids
from sessionize.logic.page_views import PageViews

_Split = Any  # sessions._Split (sessions.py imports this module): the cut sessions


def emitted_tables(split: _Split, lay: schema.Layout) -> tuple[pa.Table, pa.Table, pa.Table | None]:
    """SESSIONS and PAGE_VIEWS rows of the emitted sessions, both in sorted key order, and
    with schema 3 the EVENTS rows (else None)."""
    if not split.emitted.any():
        events = lay.events.empty_table() if lay.carries else None
        return lay.sessions.empty_table(), lay.page_views.empty_table(), events
    sessions, ids, pos, views = _session_table(split, split.emitted, lay)
    if views is not None:
        return (sessions, *_page_view_tables(split, sessions, ids, pos, views, lay))

    session = split.session[pos]
    t = split.time[pos]
    is_last = pos == split.ends[session]
    next_t = split.time[np.minimum(pos + 1, max(len(split.time) - 1, 0))]
    until = np.where(is_last, split.closed_at[session], next_t)
    row_in_sessions = (np.cumsum(split.emitted) - 1)[session]
    page_views = pa.Table.from_arrays(
        [
            ids.take(pa.array(row_in_sessions)),
            _take(split.rows["user_id"], pa.array(split.order[pos])),
            _ts(t),
            sessions["pages"].combine_chunks().flatten(),
            pa.array((pos - split.starts[session] + 1).astype(np.int32), pa.int32()),
            pa.array((until - t) // US_PER_MS, pa.int64()),
        ],
        schema=lay.page_views,
    )
    return sessions, page_views, None


def _page_view_tables(
    split: _Split,
    sessions: pa.Table,
    ids: pa.Array,
    pos: np.ndarray,
    views: PageViews,
    lay: schema.Layout,
) -> tuple[pa.Table, pa.Table]:
    """Schema 3's PAGE_VIEWS (page views only) and EVENTS (every event) rows."""
    session = split.session[pos]
    row_in_sessions = (np.cumsum(split.emitted) - 1)[session]
    users = sessions["user_id"].combine_chunks()
    pages = sessions["pages"].combine_chunks().flatten()
    event_ids = ids.take(pa.array(row_in_sessions))
    view_ids = pc.binary_join_element_wise(
        event_ids.take(pa.array(views.event)),
        pc.cast(pa.array(views.position, pa.int32()), pa.string()),
        ":",
    )
    user_of_event = users.take(pa.array(row_in_sessions))
    page_views = pa.Table.from_arrays(
        [
            event_ids.take(pa.array(views.event)),
            user_of_event.take(pa.array(views.event)),
            view_ids,
            _ts(split.time[pos][views.event]),
            pages.take(pa.array(views.event)),
            pa.array(views.position, pa.int32()),
            pa.array(views.time_on_page_ms, pa.int64(), mask=views.time_on_page_ms < 0),
            pa.array(views.engaged_ms, pa.int64()),
        ],
        schema=lay.page_views,
    )
    in_view = views.view >= 0
    events = pa.Table.from_arrays(
        [
            event_ids,
            user_of_event,
            _ts(split.time[pos]),
            pages,
            _take(split.rows["action"], split.order[pos]),
            pa.array((pos - split.starts[session] + 1).astype(np.int32), pa.int32()),
            view_ids.take(pa.array(np.maximum(views.view, 0), mask=~in_view))
            if len(views.event)
            else pa.nulls(len(pos), pa.string()),
        ],
        schema=lay.events,
    )
    return page_views, events


def open_session_rows(split: _Split, lay: schema.Layout) -> pa.Table:
    """OPEN_SESSIONS rows (without `updated_batch`, which the processor adds) of the sessions
    not emitted, in sorted key order: what each user's state holds, as sessions."""
    target = open_sessions_schema(lay)
    held = ~split.emitted
    if not held.any():
        return target.empty_table()
    sessions, _, _, _ = _session_table(split, held, lay)
    expires = _ts(split.release[np.flatnonzero(held)])
    return sessions.append_column(schema.STATE_EXPIRY, expires).cast(target)


def open_sessions_schema(lay: schema.Layout) -> pa.Schema:
    """The layout's OPEN_SESSIONS without `updated_batch`."""
    return lay.open_sessions.remove(lay.open_sessions.get_field_index(schema.UPDATED_BATCH))


def _session_table(
    split: _Split, chosen: np.ndarray, lay: schema.Layout
) -> tuple[pa.Table, pa.Array, np.ndarray, PageViews | None]:
    """SESSIONS rows of the `chosen` sessions (a mask over them); also their ids, the
    positions of their events (runs of consecutive positions, in order) and, with schema 3,
    their page views."""
    sel = np.flatnonzero(chosen)
    first, last = split.starts[sel], split.ends[sel]
    start_t, end_t = split.time[first], split.time[last]
    counts = (last - first + 1).astype(np.int64)
    first_rows = pa.array(split.order[first])
    users = _take(split.rows["user_id"], first_rows)
    ids = (
        split.ids.take(pa.array(sel))
        if split.ids is not None
        else session_ids(users, start_t, split.rank[sel])
    )

    # Chosen sessions are runs of consecutive positions: their pages, in order, are both
    # the sessions' `pages` lists and the page views' `page` column.
    pos = np.flatnonzero(chosen[split.session])
    pages = _take(split.rows["page"], split.order[pos])
    bounds = np.concatenate([[0], np.cumsum(counts)])
    offsets = pa.array(bounds.astype(np.int32))
    duration_ms = (end_t - start_t) // US_PER_MS
    carried, views = _carried(split, sel, pos, bounds, duration_ms, lay)
    sessions = pa.Table.from_arrays(
        [
            ids,
            users,
            _ts(start_t),
            _ts(end_t),
            _ts(split.closed_at[sel]),
            pa.array(duration_ms, pa.int64()),
            pa.array(counts, pa.int64()),
            pa.ListArray.from_arrays(offsets, pages),
            END_REASONS.take(pa.array(split.reason[sel])),
            *(_take(split.rows[name], first_rows) for name in lay.attributes),
            *carried,
            pa.array(split.day[sel], pa.int32()).view(pa.date32()),
        ],
        schema=lay.sessions,
    )
    return sessions, ids, pos, views


def _carried(
    split: _Split,
    sel: np.ndarray,
    pos: np.ndarray,
    bounds: np.ndarray,
    duration_ms: np.ndarray,
    lay: schema.Layout,
) -> tuple[list[pa.Array], PageViews | None]:
    """The `last:` kept fields and, with schema 2 or 3, what else a session carries, of
    the chosen sessions `sel` (their events are `pos`, in runs of `bounds`); with schema 3
    their page views too."""
    if not lay.last and lay.content is None:
        return [], None
    events = split.order[pos]
    starts, ends = bounds[:-1], bounds[1:] - 1
    out = [last_values(_take(split.rows[name], events), starts, ends) for name in lay.last]
    if lay.content is None:
        return out, None
    runs = SessionRuns(split.rows, events, split.time[pos], starts, ends, duration_ms)
    if lay.carries:
        v = split.visit
        visit = Visit(v.traffic[sel], v.click[sel], split.continues_id.take(pa.array(sel)))
        columns, views = content_columns_3(runs, lay.content, visit)
        return out + columns, views
    out += content_columns(runs, lay.content)
    return out, None


def _ts(values: np.ndarray) -> pa.Array:
    """int64 µs -> timestamp array (a view, no conversion)."""
    return pa.array(values, pa.int64()).view(schema.TS)


def _take(col: pa.ChunkedArray, indices) -> pa.Array:
    return col.take(indices).combine_chunks()
