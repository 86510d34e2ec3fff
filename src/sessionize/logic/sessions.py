"""Advance one partition by one micro-batch: late split, dedup, sessions, emission.

The rules are those of docs/design.md, "Semantics".

Everything here is pure and vectorized over the whole partition (pyarrow + numpy, one sort
of the partition's keys; no Python call per user or per event). The same function serves
the streaming engines and batch mode, so that both give the same sessions.

The rules, with their bounds:

1. An event is **late** iff `event_time < watermark_before` (strict; None = minus infinity).
   Lateness is judged before deduplication: every late copy goes to `late`.
2. On-time events with equal `(user_id, event_time, page)` are one event, whether the copies
   are in the batch or one is in the state. The surviving copy is the smallest by
   `(action, site, api_version, browser, language, device_type)` (then the rules' fields
   `change_value` and `gap_us` when set), compared as UTF-8 bytes with nulls last — also
   against the state's copy, which a smaller copy replaces. So the choice depends neither
   on arrival order nor on batch boundaries (a copy arriving while its session is open
   gives what one batch holding both copies gives; once the session is emitted, any copy
   is late). Exact re-deliveries, the usual case, keep the state's row unchanged. Every
   dropped copy counts in `duplicates`.
3. A user's events (state ∪ kept on-time events) sorted by `(event_time, page)` split into
   sessions (`logic.boundaries`): by default an event joins the current session iff
   `event_time <= previous + gap` (inclusive) and the previous event's action is not a
   close action; the optional rules add their cuts, greedily from the first event.
4. `closed_at` is the earliest moment that a rule gives (`end_reason` names it). A
   session is emitted iff `watermark_after` is past its release (strict; None never
   emits): `closed_at`, or for sessions sharing a start millisecond (they share an id
   but for a suffix, `logic.ids`) the last one's `closed_at` and that millisecond. Since
   releases never decrease along a user's sessions, the emitted ones are a prefix and the
   open ones the rest; the user's new state rows carry `expires_at` = min release of the
   open ones.

With `rules.revise_within_us` (`--revise-within`, docs/design.md "Revisions") an event is
late only when older than `watermark_before - window`; the state also keeps the emitted
sessions' events for the window, which the new ones are cut with again, and the outputs
split into first writes and revisions (`logic.revisions`).

The rules decide all of the above, so they are part of the state: the open sessions
stored under one set of rules are not valid under another.

Millisecond outputs (`duration_ms`, `time_on_page_ms`, the start in `session_id`) are
floored from microseconds.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sessionize import schema
from sessionize.config import SessionRules
from sessionize.logic.boundaries import cut_sessions
from sessionize.logic.continuation import Carry, Sources, read_carry
from sessionize.logic.dedup import survivors
from sessionize.logic.event_columns import is_close as close_flags
from sessionize.logic.event_columns import late_table, rule_columns, string_rank, without_bots
from sessionize.logic.ids import same_millisecond
from sessionize.logic.result import StepResult, StepStats
from sessionize.logic.revised_identity import revised_users, spans
from sessionize.logic.revisions import Marks, check_revisable, revised_step
from sessionize.logic.session_rows import emitted_tables, open_session_rows
from sessionize.logic.set_aside import set_aside, with_aside
from sessionize.logic.sort_order import sort_order
from sessionize.logic.visits import Kept, carry_table, with_visits


def advance(
    state: pa.Table,
    events: pa.Table,
    *,
    rules: SessionRules,
    watermark_before: int | None,
    watermark_after: int | None,
    layout: schema.Layout | None = None,
    open_sessions: bool = False,
    identities: pa.Table | None = None,
) -> StepResult:
    """Advance the handed-in users of one partition by one micro-batch.

    `state` holds all open events of some users (schema STATE; its `expires_at` is
    ignored and recomputed); `events` the batch's parsed events of this partition
    (schema EVENT, any order, duplicates allowed). Users absent from both are untouched
    and absent from every output. Watermarks are microseconds since the epoch, None
    meaning minus infinity: `watermark_before` judges lateness, `watermark_after`
    (>= `watermark_before`) decides which sessions are emitted. `layout` gives the user
    id's type and the kept attributes (default: integer ids, the five default attributes).
    With `open_sessions`, the result also holds the rows of the sessions still open
    (session_rows.open_session_rows) and the users handed in (`touched`), whose rows of
    open sessions these replace. With `rules.revise_within_us`, `state` holds the kept
    emitted sessions' events too (with their marks), and the result's `revisions` the
    `session_revisions` rows and the revised sessions' page views.
    """
    _check_watermarks(watermark_before, watermark_after)
    lay = layout or schema.layout()
    window = rules.revise_within_us
    judged = watermark_before
    if window is not None:
        check_revisable(lay, open_sessions)
        lay = replace(lay, revise=True)
        if watermark_before is not None:  # events of the window revise what they join
            watermark_before -= window
    state_events, carry_rows = _split_state(state, lay)
    events = _conform(events, lay.event)
    events, bot_events = without_bots(events, lay)

    # Rule 1: lateness, before dedup (`late_events` names the watermark the event missed).
    if watermark_before is None:
        on_time = events
        late = lay.late_events.empty_table()
    else:
        is_late = _ts_numpy(events["event_time"]) < watermark_before
        if is_late.any():
            on_time = events.filter(pa.array(~is_late))
            missed = watermark_before + (window or 0)
            late = late_table(events.filter(pa.array(is_late)), missed, lay)
        else:
            on_time = events
            late = lay.late_events.empty_table()

    n_state = state_events.num_rows
    n_events = n_state + on_time.num_rows
    parts = [state_events, on_time] + (
        [carry_rows.drop_columns([schema.CARRIED_SESSION])] if carry_rows is not None else []
    )
    rows = pa.concat_tables(parts).combine_chunks()
    user, user_values = _user_codes(rows["user_id"])
    time = _ts_numpy(rows["event_time"])
    page_rank = string_rank(rows["page"])
    is_close = close_flags(rows["action"], rules.close_actions)
    change, gap = rule_columns(rows, rules, lay)
    marks = Marks.of(state, rows.num_rows) if window is not None else None
    carry = None
    if carry_rows is not None:
        carry = read_carry(
            carry_rows[schema.CARRIED_SESSION].combine_chunks(),
            carry_rows["action"].combine_chunks(),
            user[n_events:],
            time[n_events:],
            n_events,
        )

    # One sort of the partition's keys: (user_id, event_time, page); carry rows are no events.
    order = sort_order(user[:n_events], time[:n_events], page_rank[:n_events])
    from_state = order[order < n_state]
    cuts = cut_sessions(
        user[from_state],
        time[from_state],
        is_close[from_state],
        rules,
        *(None if c is None else c[from_state] for c in (change, gap)),
    )
    open_before = len(cuts.starts)
    aside = None
    if marks is not None and open_before:  # kept sessions are no open ones
        unmarked = marks.code[from_state] < 0
        open_before = int(np.count_nonzero(np.logical_or.reduceat(unmarked, cuts.starts)))
        if judged is not None and window is not None:  # users with a late event re-cut
            behind = user[n_state:n_events][time[n_state:n_events] < judged]
            aside = set_aside(from_state, cuts, user, time, unmarked, behind, window)
            marks = marks.without(aside.rows)
            order = order[~np.isin(order, aside.rows)]

    # Rule 2: dedup; `order` keeps only the surviving copies, still sorted (a kept copy
    # first among equal ones, so that a re-delivery of a kept event changes nothing).
    ranked = rows if marks is None else rows.append_column("_new", marks.unmarked())
    order = order[survivors(ranked, order, user, time, page_rank)]
    duplicates = rows.num_rows - len(order) - (0 if aside is None else len(aside.rows))

    # Rules 3 and 4: split into sessions, decide which are emitted.
    split = _Split.of(
        rows,
        order,
        user[order],
        time[order],
        is_close[order],
        rules,
        watermark_after,
        *(None if c is None else c[order] for c in (change, gap)),
    )
    if lay.carries:
        split = with_visits(
            split,
            rules,
            lay,
            carry or Carry.empty(),
            watermark_after,
            gap[order] if gap is not None else None,
        )
    if marks is not None:  # `stored`: the split whose `emitted` sessions leave the state
        assert window is not None
        users = None
        if lay.sent_user:
            users = revised_users(split, rows, aside, identities, rules.user_ttl_us)
        done = revised_step(split, marks, window, watermark_after, lay, _state_table, users)
        sessions, page_views, emitted_events, revisions, state_puts, stored, written = done
    else:
        revisions, stored, written = None, split, None
        sessions, page_views, emitted_events = emitted_tables(split, lay)
        state_puts = _state_table(split, lay)

    open_users = np.unique(stored.user[~stored.row_emitted])
    if aside is not None:  # the kept rows set aside join their users' new rows
        state_puts, still = with_aside(state_puts, stored, state, aside, watermark_after, lay)
        open_users = np.union1d(open_users, still)
    if split.kept is not None and len(split.kept.user):
        open_users = np.union1d(open_users, split.kept.user)
    state_users = np.unique(np.concatenate([user[:n_state], user[n_events:]]))
    state_removes = user_values(np.setdiff1d(state_users, open_users, assume_unique=True))
    stats = StepStats(
        events_in=events.num_rows,
        on_time=on_time.num_rows,
        late=late.num_rows,
        duplicates=duplicates,
        sessions_out=sessions.num_rows,
        page_views_out=page_views.num_rows,
        open_sessions_before=open_before,
        open_sessions_after=int(np.count_nonzero(~split.emitted)),
        open_users_after=len(open_users),
        bot_events=bot_events,
    )
    held = {}
    if open_sessions:
        held = {
            "open_sessions": open_session_rows(split, lay),
            "touched": user_values(np.unique(user)),
        }
    return StepResult(
        sessions,
        page_views,
        late,
        state_puts,
        state_removes,
        stats,
        events=emitted_events,
        runs=spans(stored, aside, watermark_after) if lay.sent_user else None,
        revisions=revisions,
        users=written,
        **held,
    )


@dataclass(frozen=True)
class _Split:
    """The kept events sorted by key and cut into sessions.

    Per position (kept events in sorted order): `order` (its row in `rows`), `user`,
    `time`, `session` (its session's index), `row_emitted`. Per session: `starts` and
    `ends` (first and last position), `closed_at`, `reason` (index into END_REASONS),
    `day` (session_date), `rank` (1 + the number of the user's earlier sessions that
    start in the same millisecond), `release` (when it may be emitted), `emitted`.
    """

    rows: pa.Table
    order: np.ndarray
    user: np.ndarray
    time: np.ndarray
    session: np.ndarray
    row_emitted: np.ndarray
    starts: np.ndarray
    ends: np.ndarray
    closed_at: np.ndarray
    reason: np.ndarray
    day: np.ndarray
    rank: np.ndarray
    release: np.ndarray
    emitted: np.ndarray
    # Schema 3 (continuation.py, with_visits): per session its id, traffic and click rows
    # and the id of the session it continues; the carry rows the users keep.
    ids: pa.Array | None = None
    visit: Sources | None = None
    continues_id: pa.Array | None = None
    kept: Kept | None = None

    @classmethod
    def of(
        cls,
        rows,
        order,
        user,
        time,
        is_close,
        rules: SessionRules,
        watermark_after,
        change=None,
        gap=None,
    ):
        n = len(order)
        cuts = cut_sessions(user, time, is_close, rules, change, gap)
        starts = cuts.starts
        ends = np.append(starts[1:], n)[: len(starts)] - 1
        session = np.cumsum(_mask_at(n, starts)) - 1
        rank, release = same_millisecond(user[starts], time[starts], cuts.closed_at)
        if watermark_after is None:
            emitted = np.zeros(len(starts), dtype=bool)
        else:
            emitted = release < watermark_after
        return cls(
            rows=rows,
            order=order,
            user=user,
            time=time,
            session=session,
            row_emitted=emitted[session],
            starts=starts,
            ends=ends,
            closed_at=cuts.closed_at,
            reason=cuts.reason,
            day=cuts.day,
            rank=rank,
            release=release,
            emitted=emitted,
        )


# ---------------------------------------------------------------------------- outputs


def _state_table(split: _Split, lay: schema.Layout) -> pa.Table:
    """STATE rows of the open events, in sorted key order, with each user's expiry."""
    open_sessions = np.flatnonzero(~split.emitted)
    expires = np.zeros(len(split.emitted), dtype=np.int64)
    if len(open_sessions):
        # Min release over each user's run of open sessions.
        users = split.user[split.starts[open_sessions]]
        user_start = np.flatnonzero(np.append(True, users[1:] != users[:-1]))
        per_user = np.minimum.reduceat(split.release[open_sessions], user_start)
        run = np.cumsum(_mask_at(len(open_sessions), user_start)) - 1
        expires[open_sessions] = per_user[run]
    pos = np.flatnonzero(~split.row_emitted)
    table = split.rows.take(pa.array(split.order[pos])).append_column(
        schema.STATE_EXPIRY, _ts(expires[split.session[pos]])
    )
    if not lay.carries:
        return table.cast(lay.state).combine_chunks()
    table = table.append_column(schema.CARRIED_SESSION, pa.nulls(table.num_rows, pa.string()))
    table = table.select(lay.state.names)
    if split.kept is None or not len(split.kept.user):
        return table.cast(lay.state).combine_chunks()
    carried = carry_table(split, split.kept, expires, lay)
    both = pa.concat_tables([table.cast(lay.state), carried.cast(lay.state)])
    # Sorted by user, the carry rows first (a stable sort: each part keeps its order).
    users = _user_codes(both["user_id"])[0]
    return both.take(pa.array(np.argsort(users, kind="stable"))).combine_chunks()


# ---------------------------------------------------------------------------- helpers


def _split_state(state: pa.Table, lay: schema.Layout) -> tuple[pa.Table, pa.Table | None]:
    """The state's event rows, and with schema 3 its carry rows (continuation.py; None
    without any)."""
    if not lay.carries:
        return _conform(state, lay.event), None
    if schema.CARRIED_SESSION not in state.column_names:
        raise ValueError(
            f"state lacks column {schema.CARRIED_SESSION}; expected {lay.state_rows.names}"
        )
    is_carry = pc.is_valid(state[schema.CARRIED_SESSION])
    if not pc.any(is_carry).as_py():  # no carry rows: the state's rows are its events
        return _conform(state, lay.event), None
    carry = state.filter(is_carry)
    return (
        _conform(state.filter(pc.invert(is_carry)), lay.event),
        _conform(carry, lay.event).append_column(
            schema.CARRIED_SESSION, carry[schema.CARRIED_SESSION]
        ),
    )


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


def _ts(values: np.ndarray) -> pa.Array:
    """int64 µs -> timestamp array (a view, no conversion)."""
    return pa.array(values, pa.int64()).view(schema.TS)


def _ts_numpy(col: pa.ChunkedArray) -> np.ndarray:
    return _int_numpy(pc.cast(col, pa.int64()))


def _int_numpy(col: pa.ChunkedArray) -> np.ndarray:
    if col.num_chunks == 0:
        return np.zeros(0, dtype=np.int64)
    return col.to_numpy().astype(np.int64, copy=False)


def _mask_at(n: int, positions: np.ndarray) -> np.ndarray:
    mask = np.zeros(n, dtype=bool)
    mask[positions] = True
    return mask


def _user_codes(col: pa.ChunkedArray):
    """User ids as int64 codes that sort and compare as the ids do (the ids themselves, or
    the dense rank of string ids in UTF-8 byte order), and the inverse: codes -> ids."""
    if not pa.types.is_string(col.type):
        return _int_numpy(col), lambda codes: pa.array(codes, pa.int64())
    if len(col) == 0:
        return np.zeros(0, dtype=np.int64), lambda codes: pa.array([], pa.string())
    distinct = pc.unique(col)
    ordered = pc.sort_indices(distinct)
    by_rank = distinct.take(ordered)
    rank = np.empty(len(distinct), dtype=np.int64)
    rank[ordered.to_numpy()] = np.arange(len(distinct))
    codes = rank[_int_numpy(pc.index_in(col, distinct))]
    return codes, lambda c: by_rank.take(pa.array(c, pa.int64()))
