"""Revisions of emitted sessions by late events (`--revise-within`; docs/design.md,
"Revisions"): of a re-cut of a user's kept, open and new events, which sessions are
written for the first time, revised, unchanged or retracted, and which the state keeps.

The caller (`sessions.advance`) cuts every event together by the usual rules; this module
compares the cut with the marks the kept events carry (the id and revision each was last
written under). Pure and vectorized like the rest of the logic.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sessionize import schema
from sessionize.base_schema import (
    EMITTED_REVISION,
    EMITTED_SESSION,
    EMITTED_USER,
    RETRACTED,
    REVISION,
)
from sessionize.logic.ids import session_ids
from sessionize.logic.result import WrittenUsers
from sessionize.logic.session_rows import emitted_tables

# `split` below is a `sessions._Split` (sessions.py imports this module): the cut sessions.


@dataclass(frozen=True)
class Marks:
    """Per row of a step (the state's rows first, then the batch's): the emitted session
    it was kept from, as `code` (an index into `ids`; -1: none, an event of an open session
    or a new one) and the `revision` that session was written with (-1: none); with
    identity, `user`: the user id it was written with (null: none known, or unmarked)."""

    code: np.ndarray
    revision: np.ndarray
    ids: pa.Array
    n_state: int
    user: pa.Array | None = None

    @classmethod
    def of(cls, state: pa.Table, n_rows: int) -> Marks:
        """The marks of `state`'s rows (its `emitted_session` and `emitted_revision`), the
        `n_rows - len(state)` rows after them unmarked."""
        n = state.num_rows
        code = np.full(n_rows, -1, dtype=np.int64)
        revision = np.full(n_rows, -1, dtype=np.int64)
        column = state[EMITTED_SESSION].combine_chunks() if n else pa.array([], pa.string())
        ids = pc.unique(column.drop_null())
        if n:
            code[:n] = pc.fill_null(pc.index_in(column, ids), -1).to_numpy(zero_copy_only=False)
            rev = pc.fill_null(state[EMITTED_REVISION].combine_chunks(), -1)
            revision[:n] = rev.to_numpy(zero_copy_only=False)
        user = None
        if EMITTED_USER in state.column_names:
            written = state[EMITTED_USER].combine_chunks() if n else pa.array([], pa.string())
            user = pa.concat_arrays([written, pa.nulls(n_rows - n, pa.string())])
        return cls(code, revision, ids, n, user)

    def without(self, rows: np.ndarray) -> Marks:
        """These marks with `rows` (set aside, out of the cut) unmarked, so that no kept
        id of theirs is taken for retracted."""
        code = self.code.copy()
        code[rows] = -1
        return replace(self, code=code)

    def top(self) -> np.ndarray:
        """Per kept id: the revision it was last written with."""
        known = self.code[: self.n_state] >= 0
        top = np.full(len(self.ids), -1, dtype=np.int64)
        np.maximum.at(top, self.code[: self.n_state][known], self.revision[: self.n_state][known])
        return top

    def id_users(self) -> pa.Array:
        """Per kept id: the user id it was last written with (all of an id's rows carry
        the same); nulls without identity."""
        known = self.code[: self.n_state]
        first_row = np.zeros(len(self.ids), dtype=np.int64)
        rows = np.flatnonzero(known >= 0)
        first_row[known[rows]] = rows
        if self.user is None:
            return pa.nulls(len(self.ids), pa.string())
        return self.user.take(pa.array(first_row))

    def unmarked(self) -> pa.Array:
        """Per row: not kept from an emitted session (on an exact duplicate, dedup keeps
        the kept copy: False sorts first)."""
        return pa.array(self.code < 0)


@dataclass(frozen=True)
class Revised:
    """Per session of the cut: `first` (emitted now for the first time: `sessions`),
    `revised` (emitted now as a revision), `revision`, `ids`, `dropped` (its events leave
    the state) and `hold` (when its user must be handed in again: the release of an open
    session, `release + window` of a kept one); and the retraction rows."""

    first: np.ndarray
    revised: np.ndarray
    revision: np.ndarray
    ids: pa.Array
    dropped: np.ndarray
    hold: np.ndarray
    retractions: pa.Table
    retracted: np.ndarray  # per kept id (and one more for "none"): retracted now
    retracted_users: pa.Array  # per retraction row: the user id it was last written with


def revise(
    split,
    marks: Marks,
    window_us: int,
    watermark_after: int | None,
    lay: schema.Layout,
    users: pa.Array | None = None,
) -> Revised:
    """Compare the cut `split` (emission decided) with the kept sessions' marks.

    An emitted session that holds no kept event is a first write; one that holds exactly
    the events of one kept session, under its id (and with identity, `users` per session:
    with the user id it was written with), is unchanged; any other is a revision,
    numbered 1 + the greatest revision of the kept events it holds. A kept id that no
    emitted session has is retracted, also when its events are in an open session now
    (which is written as a revision once emitted).
    """
    k = len(split.starts)
    keys = split.rows["user_id"].combine_chunks()
    ids = session_ids(
        keys.take(pa.array(split.order[split.starts])), split.time[split.starts], split.rank
    )
    code = marks.code[split.order]  # per position
    rev = marks.revision[split.order]
    if k:
        kept_n = np.add.reduceat((code >= 0).astype(np.int64), split.starts)
        low = np.minimum.reduceat(np.where(code >= 0, code, np.iinfo(np.int64).max), split.starts)
        high = np.maximum.reduceat(code, split.starts)
        top = np.maximum.reduceat(rev, split.starts)
    else:
        kept_n = low = high = top = np.zeros(0, dtype=np.int64)
    size = split.ends - split.starts + 1
    own = pc.fill_null(pc.index_in(ids, marks.ids), -1).to_numpy(zero_copy_only=False)
    known = marks.code[: marks.n_state]
    total = np.bincount(known[known >= 0], minlength=len(marks.ids))
    whole = np.zeros(k, dtype=bool)
    marked = kept_n == size
    whole[marked] = total[low[marked]] == size[marked]
    unchanged = marked & (low == high) & (low == own) & whole
    if users is not None and len(marks.ids):  # a late login changes later sessions' user
        was = marks.id_users().take(pa.array(np.maximum(own, 0)))
        unchanged &= _same(users, was)
    # A session under a kept id that holds none of its events (a smaller copy replaced
    # them) still revises that id.
    last = np.append(marks.top(), -1)  # index -1 (no kept id): -1
    top = np.maximum(top, last[own])
    first = split.emitted & (top < 0)
    revised = split.emitted & (top >= 0) & ~unchanged
    revision = np.where(top < 0, 0, np.where(unchanged, top, top + 1))

    after = np.iinfo(np.int64).min if watermark_after is None else watermark_after
    dropped = split.emitted & (split.release + window_us < after)
    hold = np.where(split.emitted, split.release + window_us, split.release)

    gone = np.setdiff1d(np.unique(known[known >= 0]), own[split.emitted])
    retracted = np.zeros(len(marks.ids) + 1, dtype=bool)
    retracted[gone] = True
    return Revised(
        first,
        revised,
        revision,
        ids,
        dropped,
        hold,
        _retractions(gone, marks, keys, lay),
        retracted,
        marks.id_users().take(pa.array(gone, pa.int64())),
    )


def _written(split, r: Revised, marks: Marks, users: pa.Array) -> WrittenUsers:
    """The users of the sessions written now (`WrittenUsers`)."""
    own = pc.fill_null(pc.index_in(r.ids, marks.ids), -1).to_numpy(zero_copy_only=False)
    own = own[r.revised]
    had = np.concatenate([own >= 0, np.ones(len(r.retracted_users), dtype=bool)])
    before = pa.nulls(len(own), pa.string())
    if len(marks.ids):
        before = marks.id_users().take(pa.array(np.maximum(own, 0), pa.int64()))
    previous = pa.concat_arrays([before, r.retracted_users])
    gone = np.full(len(r.retracted_users), -1, dtype=np.int64)
    return WrittenUsers(
        first=users.filter(pa.array(r.first)),
        first_release=split.release[r.first],
        again=pa.concat_arrays([users.filter(pa.array(r.revised)), r.retracted_users]),
        again_release=np.concatenate([split.release[r.revised], gone]),
        previous=previous,
        had=had,
    )


def _same(a: pa.Array, b: pa.Array) -> np.ndarray:
    """Per position: equal, two nulls counting as equal."""
    equal = pc.fill_null(pc.equal(a, b), False)
    both = pc.and_(pc.is_null(a), pc.is_null(b))
    return pc.or_(equal, both).to_numpy(zero_copy_only=False)


def _retractions(gone: np.ndarray, marks: Marks, users: pa.Array, lay: schema.Layout):
    """`session_revisions` rows retracting the kept ids `gone`: the id, its user, its
    revision + 1 and `retracted`, the rest null."""
    target = lay.session_revisions
    if not len(gone):
        return target.empty_table()
    known = marks.code[: marks.n_state]
    top = marks.top()
    first_row = np.full(len(marks.ids), -1, dtype=np.int64)
    rows = np.flatnonzero(known >= 0)
    first_row[known[rows]] = rows  # a row of each id (all of an id's rows are one user's)
    columns = {
        "session_id": marks.ids.take(pa.array(gone)),
        REVISION: pa.array(top[gone] + 1, pa.int64()),
        RETRACTED: pa.array(np.ones(len(gone), dtype=bool)),
        "user_id": users.take(pa.array(first_row[gone])),
    }
    arrays = [columns.get(f.name, pa.nulls(len(gone), f.type)) for f in target]
    return pa.Table.from_arrays(arrays, schema=target)


def revision_rows(sessions: pa.Table, revision: np.ndarray, lay: schema.Layout) -> pa.Table:
    """`session_revisions` rows of revised sessions (their `sessions` rows, in order)."""
    n = sessions.num_rows
    table = sessions.add_column(1, REVISION, pa.array(revision, pa.int64()))
    table = table.add_column(2, RETRACTED, pa.array(np.zeros(n, dtype=bool)))
    return table.cast(lay.session_revisions)


def with_marks(
    split, positions: np.ndarray, r: Revised, marks: Marks, users: pa.Array | None = None
) -> tuple[pa.Array, ...]:
    """The marks of the state rows at `positions` of the cut: the id and revision (and with
    `users`, per session, the user id) of their session if it is emitted (now or before),
    else the marks they came with; an open session's event of a retracted id keeps no id
    (nor user) but the retraction's revision, so that the session's next write numbers
    after it."""
    session = split.session[positions]
    emitted = split.emitted[session]
    was = marks.code[split.order[positions]]
    gone = r.retracted[was]  # code -1: the extra "none" entry, never retracted
    code = np.where(gone, -1, was)
    if len(marks.ids):
        prior = marks.ids.take(pa.array(np.maximum(code, 0), mask=code < 0))
    else:
        prior = pa.nulls(len(positions), pa.string())
    ids = pc.if_else(pa.array(emitted), r.ids.take(pa.array(session)), prior)
    before = marks.revision[split.order[positions]]
    retraction = np.append(marks.top(), -1)[was] + 1
    rev = np.where(emitted, r.revision[session], np.where(gone, retraction, before))
    revs = pa.array(rev, pa.int64(), mask=rev < 0)
    if users is None or marks.user is None:
        return ids, revs
    came = marks.user.take(pa.array(split.order[positions]))
    came = pc.if_else(pa.array(gone), pa.nulls(len(positions), pa.string()), came)
    return ids, revs, pc.if_else(pa.array(emitted), users.take(pa.array(session)), came)


def revised_step(
    split,
    marks: Marks,
    window_us: int,
    watermark_after: int | None,
    lay: schema.Layout,
    state_table: Callable[..., pa.Table],
    users: pa.Array | None = None,
) -> tuple:
    """`advance`'s outputs with revisions: the first writes' `sessions` and `page_views`
    (and None for schema 3's events, not revised yet), the `session_revisions` rows
    (revisions, then retractions) with the revised sessions' page views, the state rows
    (`state_table` of the kept sessions, with their marks), the split whose `emitted`
    sessions leave the state and, with identity (`users`: per session of the cut, the user
    id known at its emission), the user ids of the `sessions` rows and of the
    `session_revisions` rows (a retraction's: the one it was last written with)."""
    r = revise(split, marks, window_us, watermark_after, lay, users)
    sessions, page_views, _ = emitted_tables(replace(split, emitted=r.first), lay)
    again, views, _ = emitted_tables(replace(split, emitted=r.revised), lay)
    found = revision_rows(again, r.revision[r.revised], lay)
    stored = replace(split, emitted=r.dropped, row_emitted=r.dropped[split.session], release=r.hold)
    puts = state_table(stored, replace(lay, revise=False))
    marked = with_marks(split, np.flatnonzero(~stored.row_emitted), r, marks, users)
    names = (EMITTED_SESSION, EMITTED_REVISION, EMITTED_USER)[: len(marked)]
    for name, column in zip(names, marked, strict=True):
        puts = puts.append_column(name, column)
    revisions = (pa.concat_tables([found, r.retractions]), views)
    written = None if users is None else _written(split, r, marks, users)
    return sessions, page_views, None, revisions, puts.select(lay.state.names), stored, written


def check_revisable(lay: schema.Layout, open_sessions: bool) -> None:
    """Revisions do not yet revise schema 3's continued visits or open sessions."""
    if lay.carries or open_sessions:
        raise ValueError(
            "revisions (--revise-within) do not yet revise schema 3's continued visits "
            "or --open-sessions: leave one of them out"
        )
