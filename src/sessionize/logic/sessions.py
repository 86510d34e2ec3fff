"""Advance one partition by one micro-batch: late split, dedup, sessions, emission (DESIGN §3).

Everything here is pure and vectorized over the whole partition (pyarrow + numpy, one sort
of the partition's keys; no Python call per user or per event). The same function serves
the streaming engines and batch mode, so that both give the same sessions.

The rules, with their bounds:

1. An event is **late** iff `event_time < watermark_before` (strict; None = minus infinity).
   Lateness is judged before deduplication: every late copy goes to `late`.
2. On-time events with equal `(user_id, event_time, page)` are one event. The surviving copy
   is the state's copy if the state has one, otherwise the smallest by
   `(action, site, api_version, browser, language, device_type)`, compared as UTF-8 bytes
   with nulls last. Dropped on-time copies of the batch are counted as `duplicates`.
3. A user's events (state ∪ kept on-time events) sorted by `(event_time, page)` split into
   sessions: an event joins the current session iff `event_time <= previous + gap`
   (inclusive) and the previous event's action is not a close action.
4. `closed_at` is the closing event's time for a session that ends with a close action
   (`explicit`), else last event + gap (`inactivity`). A session is emitted iff
   `watermark_after > closed_at` (strict; None never emits). Since `closed_at` never
   decreases along a user's sessions, the emitted ones are a prefix and the open ones
   the rest; the user's new state rows carry `expires_at` = min `closed_at` of the open ones.

`gap`, `lateness` and `close_actions` decide all of the above, so they are part of the
state: the open sessions stored under one set of rules are not valid under another.

Millisecond outputs (`duration_ms`, `time_on_page_ms`, the start in `session_id`) are
floored from microseconds.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sessionize import schema
from sessionize.config import SessionRules
from sessionize.logic.result import StepResult, StepStats

_ATTRS = ("site", "api_version", "browser", "language", "device_type")
# Columns that decide which copy of a duplicated event survives, after the state-first rule.
_TIEBREAK = ("action", *_ATTRS)
_US_PER_MS = 1_000
_US_PER_DAY = 86_400_000_000
_ORIGIN = "__origin"  # 0 = state row, 1 = batch event (temporary column)
_END_REASONS = pa.array(["inactivity", "explicit"], pa.string())


def advance(
    state: pa.Table,
    events: pa.Table,
    *,
    rules: SessionRules,
    watermark_before: int | None,
    watermark_after: int | None,
) -> StepResult:
    """Advance the handed-in users of one partition by one micro-batch.

    `state` holds all open events of some users (schema STATE; its `expires_at` is
    ignored and recomputed); `events` the batch's parsed events of this partition
    (schema EVENT, any order, duplicates allowed). Users absent from both are untouched
    and absent from every output. Watermarks are microseconds since the epoch, None
    meaning minus infinity: `watermark_before` judges lateness, `watermark_after`
    (>= `watermark_before`) decides which sessions are emitted.
    """
    _check_watermarks(watermark_before, watermark_after)
    state_events = _conform(state, schema.EVENT)
    events = _conform(events, schema.EVENT)

    # Rule 1: lateness, before dedup.
    if watermark_before is None:
        on_time = events
        late = _empty(schema.LATE_EVENTS)
    else:
        late_mask = pa.array(_ts_numpy(events["event_time"]) < watermark_before)
        on_time = events.filter(pc.invert(late_mask))
        late = _late_table(events.filter(late_mask), watermark_before)

    n_state = state_events.num_rows
    rows = pa.concat_tables([state_events, on_time]).combine_chunks()
    user = _int_numpy(rows["user_id"])
    time = _ts_numpy(rows["event_time"])
    page_rank = _string_rank(rows["page"])
    is_close = _is_close(rows["action"], rules.close_actions)

    # One sort of the partition's keys: (user_id, event_time, page).
    order = _sort_order(user, time, page_rank)
    open_before = _count_sessions(
        *(a[order[order < n_state]] for a in (user, time, is_close)), rules.gap_us
    )

    # Rule 2: dedup; `order` keeps only the surviving copies, still sorted.
    order = order[_survivors(rows, n_state, order, user, time, page_rank)]
    duplicates = on_time.num_rows - int(np.count_nonzero(order >= n_state))

    # Rule 3: split into sessions.
    u, t, c = user[order], time[order], is_close[order]
    starts = _session_starts(u, t, c, rules.gap_us)
    n = len(order)
    ends = np.append(starts[1:], n)[: len(starts)] - 1  # last row of each session
    session_of_row = np.cumsum(_mask_at(n, starts)) - 1
    explicit = c[ends]
    closed_at = np.where(explicit, t[ends], t[ends] + rules.gap_us)

    # Rule 4: emission.
    if watermark_after is None:
        emitted = np.zeros(len(starts), dtype=bool)
    else:
        emitted = closed_at < watermark_after
    row_emitted = emitted[session_of_row]

    sessions, session_ids = _sessions_table(
        rows, order, u, t, starts, ends, closed_at, explicit, emitted
    )
    page_views = _page_views_table(
        rows,
        order,
        u,
        t,
        starts,
        ends,
        closed_at,
        session_of_row,
        row_emitted,
        emitted,
        session_ids,
    )
    state_puts, open_after = _state_table(
        rows, order, u, starts, closed_at, session_of_row, row_emitted, emitted
    )

    put_users = np.unique(u[~row_emitted])
    state_removes = pa.array(
        np.setdiff1d(np.unique(user[:n_state]), put_users, assume_unique=True), pa.int64()
    )
    stats = StepStats(
        events_in=events.num_rows,
        on_time=on_time.num_rows,
        late=late.num_rows,
        duplicates=duplicates,
        sessions_out=sessions.num_rows,
        page_views_out=page_views.num_rows,
        open_sessions_before=open_before,
        open_sessions_after=open_after,
        open_users_after=len(put_users),
    )
    return StepResult(sessions, page_views, late, state_puts, state_removes, stats)


# ---------------------------------------------------------------------------- rules


def _survivors(
    rows: pa.Table,
    n_state: int,
    order: np.ndarray,
    user: np.ndarray,
    time: np.ndarray,
    page_rank: np.ndarray,
) -> np.ndarray:
    """Boolean mask over `order` (rows sorted by key) keeping one copy of each key.

    Only the rows whose key occurs more than once are sorted again by the tiebreak
    columns, so the common case (few duplicates) costs one comparison of sorted keys.
    """
    u, t, p = user[order], time[order], page_rank[order]
    same_as_prev = (u[1:] == u[:-1]) & (t[1:] == t[:-1]) & (p[1:] == p[:-1])
    keep = np.ones(len(order), dtype=bool)
    if not same_as_prev.any():
        return keep
    in_dup = np.zeros(len(order), dtype=bool)
    in_dup[1:] |= same_as_prev
    in_dup[:-1] |= same_as_prev
    dup_pos = np.flatnonzero(in_dup)
    dup_rows = order[dup_pos]
    candidates = rows.take(pa.array(dup_rows)).append_column(
        _ORIGIN, pa.array((dup_rows >= n_state).astype(np.int8))
    )
    keys = [(name, "ascending") for name in (*schema.EVENT_KEY, _ORIGIN, *_TIEBREAK)]
    # Nulls sort last (the default placement).
    perm = pc.sort_indices(candidates, sort_keys=keys).to_numpy()
    ranked = dup_rows[perm]
    first = np.ones(len(ranked), dtype=bool)
    first[1:] = (
        (user[ranked[1:]] != user[ranked[:-1]])
        | (time[ranked[1:]] != time[ranked[:-1]])
        | (page_rank[ranked[1:]] != page_rank[ranked[:-1]])
    )
    keep[dup_pos] = False
    keep[dup_pos[perm[first]]] = True
    return keep


def _sort_order(user: np.ndarray, time: np.ndarray, page_rank: np.ndarray) -> np.ndarray:
    """Indices sorting rows by (user, time, page_rank); the order among equal keys is arbitrary.

    Packs the three keys into one uint64 when their ranges fit (the usual case: a batch
    spans hours and the ids of a partition's users fit in ~20 bits once ranked), which
    sorts several times faster than a lexicographic sort, used as the fallback.
    """
    if len(user) == 0:
        return np.zeros(0, dtype=np.int64)
    t, pb = _offsets(time), _bits(page_rank)
    u = _offsets(user)
    if _bits(u) + _bits(t) + pb > 64:
        u = np.unique(user, return_inverse=True)[1].reshape(-1).astype(np.uint64)
    ub, tb = _bits(u), _bits(t)
    if ub + tb + pb > 64:
        return np.lexsort((page_rank, time, user))
    key = (u.astype(np.uint64) << np.uint64(tb + pb)) | (t.astype(np.uint64) << np.uint64(pb))
    return np.argsort(key | page_rank.astype(np.uint64))


def _offsets(values: np.ndarray) -> np.ndarray | None:
    """`values - min` as uint64, or None if the range does not fit in 63 bits."""
    low, high = int(values.min()), int(values.max())
    if (high - low).bit_length() > 63:
        return None
    return (values - np.int64(low)).astype(np.uint64)


def _bits(values: np.ndarray | None) -> int:
    return 64 if values is None else int(values.max()).bit_length()


def _session_starts(u: np.ndarray, t: np.ndarray, close: np.ndarray, gap_us: int) -> np.ndarray:
    """Indices of the rows (sorted by user, time, page) that start a session."""
    if len(u) == 0:
        return np.zeros(0, dtype=np.int64)
    new = np.ones(len(u), dtype=bool)
    new[1:] = (u[1:] != u[:-1]) | (t[1:] > t[:-1] + gap_us) | close[:-1]
    return np.flatnonzero(new)


def _count_sessions(u: np.ndarray, t: np.ndarray, close: np.ndarray, gap_us: int) -> int:
    return len(_session_starts(u, t, close, gap_us))


# ---------------------------------------------------------------------------- outputs


def _sessions_table(rows, order, u, t, starts, ends, closed_at, explicit, emitted):
    """SESSIONS rows of the emitted sessions, by (user_id, start_time); also their ids."""
    sel = np.flatnonzero(emitted)
    s_first, s_last = starts[sel], ends[sel]
    start_t, end_t = t[s_first], t[s_last]
    counts = (s_last - s_first + 1).astype(np.int64)
    ids = _session_ids(u[s_first], start_t)

    first_rows = pa.array(order[s_first])
    emitted_rows = order[_ranges(s_first, counts)]
    offsets = pa.array(np.concatenate([[0], np.cumsum(counts)]).astype(np.int32))
    pages = pa.ListArray.from_arrays(offsets, _take(rows["page"], emitted_rows))

    columns = [
        ids,
        pa.array(u[s_first], pa.int64()),
        pa.array(start_t, schema.TS),
        pa.array(end_t, schema.TS),
        pa.array(closed_at[sel], schema.TS),
        pa.array((end_t - start_t) // _US_PER_MS, pa.int64()),
        pa.array(counts, pa.int64()),
        pages,
        _END_REASONS.take(pa.array(explicit[sel].astype(np.int8))),
        *(_take(rows[name], first_rows) for name in _ATTRS),
        pa.array((start_t // _US_PER_DAY).astype(np.int32), pa.date32()),
    ]
    return pa.Table.from_arrays(columns, schema=schema.SESSIONS), ids


def _page_views_table(
    rows, order, u, t, starts, ends, closed_at, session_of_row, row_emitted, emitted, session_ids
):
    """PAGE_VIEWS rows of the emitted sessions, by (user_id, event_time, page)."""
    pos = np.flatnonzero(row_emitted)
    sess = session_of_row[pos]
    is_last = pos == ends[sess]
    next_t = t[np.minimum(pos + 1, max(len(t) - 1, 0))]
    until = np.where(is_last, closed_at[sess], next_t)
    emitted_index = np.cumsum(emitted) - 1  # session -> row of the sessions table
    columns = [
        session_ids.take(pa.array(emitted_index[sess])),
        pa.array(u[pos], pa.int64()),
        pa.array(t[pos], schema.TS),
        _take(rows["page"], order[pos]),
        pa.array((pos - starts[sess] + 1).astype(np.int32), pa.int32()),
        pa.array((until - t[pos]) // _US_PER_MS, pa.int64()),
    ]
    return pa.Table.from_arrays(columns, schema=schema.PAGE_VIEWS)


def _state_table(rows, order, u, starts, closed_at, session_of_row, row_emitted, emitted):
    """STATE rows of the open events, by (user_id, event_time, page); also the open count."""
    open_sessions = np.flatnonzero(~emitted)
    expires = np.zeros(len(emitted), dtype=np.int64)
    if len(open_sessions):
        # closed_at of each user's open sessions; min over the run of each user.
        users = u[starts[open_sessions]]
        user_start = np.flatnonzero(np.append(True, users[1:] != users[:-1]))
        per_user = np.minimum.reduceat(closed_at[open_sessions], user_start)
        run = np.cumsum(_mask_at(len(open_sessions), user_start)) - 1
        expires[open_sessions] = per_user[run]
    pos = np.flatnonzero(~row_emitted)
    table = rows.take(pa.array(order[pos])).append_column(
        schema.STATE_EXPIRY, pa.array(expires[session_of_row[pos]], schema.TS)
    )
    return table.cast(schema.STATE).combine_chunks(), len(open_sessions)


def _late_table(late_events: pa.Table, watermark: int) -> pa.Table:
    """LATE_EVENTS rows, sorted by all event columns so the order never depends on arrival."""
    keys = [(name, "ascending") for name in schema.EVENT.names]
    idx = pc.sort_indices(late_events, sort_keys=keys)  # nulls last
    table = late_events.take(idx).append_column(
        "watermark", pa.array(np.full(late_events.num_rows, watermark, np.int64), schema.TS)
    )
    return table.cast(schema.LATE_EVENTS).combine_chunks()


# ---------------------------------------------------------------------------- helpers


def _check_watermarks(before: int | None, after: int | None) -> None:
    if before is not None and (after is None or after < before):
        raise ValueError(
            f"watermark_after ({after}) must be >= watermark_before ({before}): "
            "the watermark never goes back"
        )


def _conform(table: pa.Table, target: pa.Schema) -> pa.Table:
    """`table`'s columns of `target`, in its order and types (extra columns are dropped)."""
    missing = [name for name in target.names if name not in table.column_names]
    if missing:
        raise ValueError(f"input table lacks column(s) {missing}; expected {target.names}")
    table = table.select(target.names)
    if not table.schema.equals(target):
        table = table.cast(target)
    for name in schema.EVENT_KEY:
        if table[name].null_count:
            raise ValueError(f"input column {name} has nulls; it is part of the event key")
    return table


def _empty(target: pa.Schema) -> pa.Table:
    return target.empty_table()


def _ts_numpy(col: pa.ChunkedArray) -> np.ndarray:
    return _int_numpy(pc.cast(col, pa.int64()))


def _int_numpy(col: pa.ChunkedArray) -> np.ndarray:
    if col.num_chunks == 0:
        return np.zeros(0, dtype=np.int64)
    return col.to_numpy().astype(np.int64, copy=False)


def _string_rank(col: pa.ChunkedArray) -> np.ndarray:
    """Dense rank of each string (UTF-8 byte order): equal strings, equal ranks."""
    if len(col) == 0:
        return np.zeros(0, dtype=np.int64)
    distinct = pc.unique(col)
    rank = np.empty(len(distinct), dtype=np.int64)
    rank[pc.sort_indices(distinct).to_numpy()] = np.arange(len(distinct))
    return rank[_int_numpy(pc.index_in(col, distinct))]


def _is_close(actions: pa.ChunkedArray, close_actions: tuple[str, ...]) -> np.ndarray:
    if len(actions) == 0:
        return np.zeros(0, dtype=bool)
    found = pc.is_in(actions, value_set=pa.array(close_actions, pa.string()))
    return pc.fill_null(found, False).to_numpy(zero_copy_only=False).astype(bool, copy=False)


def _mask_at(n: int, positions: np.ndarray) -> np.ndarray:
    mask = np.zeros(n, dtype=bool)
    mask[positions] = True
    return mask


def _ranges(starts: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """Concatenation of `range(s, s + c)` for each pair, without a Python loop."""
    total = int(counts.sum())
    if total == 0:
        return np.zeros(0, dtype=np.int64)
    offsets = np.cumsum(counts) - counts
    return np.repeat(starts - offsets, counts) + np.arange(total)


def _take(col: pa.ChunkedArray, indices) -> pa.Array:
    return col.take(indices).combine_chunks()


def _session_ids(user: np.ndarray, start_us: np.ndarray) -> pa.Array:
    """`f"{user_id}-{start in epoch milliseconds}"`, built column-wise."""
    return pc.binary_join_element_wise(
        pc.cast(pa.array(user, pa.int64()), pa.string()),
        pc.cast(pa.array(start_us // _US_PER_MS, pa.int64()), pa.string()),
        "-",
    )
