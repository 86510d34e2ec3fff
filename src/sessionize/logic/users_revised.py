"""The users step with revisions (`--anonymous-field` with `--revise-within`;
docs/design.md, "Revisions" and "Identity"): per stitched user, the sessions emitted
within the window are kept beside the user's base row, and a user touched by a change is
numbered, attributed and summed again from both.

The first step hands on `session_changes` (`Layout.session_changes`): every session it
wrote (a first write with revision 0, or a revision) with its release, every retraction
under the stitched user the id was last written with, and a `moved` retraction under the
stitched user a revised session left. The state of a stitched user is its *base row* (the
`users` state of `users.py`: the fold of its sessions that left the window) and its *kept
rows*: the numbered rows of the sessions emitted within the window, with the revision
last published and the session's release. A kept session leaves once the watermark after
a batch is past its `release + window` (the first step's rule, so the first step never
revises a session the users step has folded), and only as a prefix of the user's
sessions in numbering order, so that base rows always precede the kept ones.

For a user handed in, its kept sessions less every id a change names, plus the changed
sessions, are numbered after the base row (`UsersProcessor.numbered`): every one whose
numbered row differs from the row last published is written again, as a first write
(`sessions`) if it was never published, else as a revision (`session_revisions`,
revision one more than the one it had), including sessions the first step did not
revise (an earlier session inserted renumbers the later ones). A retraction is published
with one more than the revision it had; a `moved` one only leaves the user's kept rows.
A session that moved in takes the first step's revision (the revision the user it left
may have published for it is not known here). Page views are the first step's alone: a
session revised here only (renumbered) has no new page views, and keeps its own.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sessionize.base_schema import MOVED, RELEASE_AT, RETRACTED, REVISION, SESSION_REVISIONS
from sessionize.core import Context, Update
from sessionize.core.declared import NEVER_US
from sessionize.logic.users import KEY, LAST_EVENT, UserRules, UsersProcessor
from sessionize.schema import numbered, revisions_of

KEPT = "kept_"  # the prefix of a kept session's columns in the state
KEPT_REVISION = "kept_revision"  # the revision last published for it
KEPT_RELEASE = "kept_release"  # its release (the first step's)
ROW = "_row"  # a helper column: the row's place among the user's sessions handed to `numbered`
TS = pa.timestamp("us", tz="UTC")


class RevisedUsersProcessor(UsersProcessor):
    """The users step keyed by `stitched_user_id` with revisions (the module doc).

    Args:
        sessions: the first step's `sessions` schema (with identity).
        rules: the users' TTL and attribution lookback.
        window_us: `--revise-within`.
        keeps_current: `users` replaced by key (a sink that keeps tables current).
    """

    # Its rows are the first step's changes, timed by their release (the epoch on a
    # retraction): the first step decided what is late, so every change reaches it.
    event_time = RELEASE_AT
    allowed_lateness_us = NEVER_US

    def __init__(
        self, sessions: pa.Schema, rules: UserRules, window_us: int, keeps_current: bool = False
    ):
        super().__init__(sessions, rules, keeps_current)
        self.window_us = window_us
        self.numbered_schema = numbered(sessions)
        self.added = [n for n in self.numbered_schema.names if n not in sessions.names]
        kept = [pa.field(KEPT + f.name, f.type) for f in self.numbered_schema if f.name != KEY]
        self.state_schema = pa.schema(
            [
                *(f if f.name == KEY else f.with_nullable(True) for f in self.base_schema),
                *kept,
                pa.field(KEPT_REVISION, pa.int64()),
                pa.field(KEPT_RELEASE, TS),
            ]
        )
        self.outputs = {
            "sessions": self.numbered_schema,
            SESSION_REVISIONS: revisions_of(self.numbered_schema),
            "users": self.outputs["users"],
        }

    def params(self) -> dict:
        return {**super().params(), "revise_within_us": self.window_us}

    def process(self, state: pa.Table, rows: pa.Table, ctx: Context) -> Update:
        base, kept = self._split(state)
        changed = _pairs(rows.column(KEY), rows.column("session_id"))
        named = pc.is_in(_pairs(kept.column(KEY), kept.column("session_id")), value_set=changed)
        stay = kept.filter(pc.invert(named))
        fresh = rows.filter(pc.invert(rows.column(RETRACTED)))
        before = _lookup(kept, fresh)  # per fresh session: its kept row (-1: none)
        plain = self.sessions.names
        both = pa.concat_tables(
            [stay.select(plain).cast(self.sessions), fresh.select(plain).cast(self.sessions)]
        )
        n_stay = stay.num_rows
        both = both.append_column(ROW, pa.array(np.arange(both.num_rows), pa.int64()))
        out, users = self.numbered(base, both)
        at = out.column(ROW).to_numpy()
        # Per numbered row: the revision last published (-1: none), the first step's
        # revision (-1: not a change) and the row last published.
        kept_rev = kept.column(KEPT_REVISION).to_numpy(zero_copy_only=False)
        replaced = np.full(len(before), -1, np.int64)
        if len(kept_rev):
            replaced = np.where(before >= 0, kept_rev[np.maximum(before, 0)], -1)
        stay_rev = stay.column(KEPT_REVISION).to_numpy(zero_copy_only=False)
        published = np.concatenate([stay_rev, replaced]).astype(np.int64)[at]
        step1 = np.concatenate(
            [np.full(n_stay, -1), fresh.column(REVISION).to_numpy(zero_copy_only=False)]
        ).astype(np.int64)[at]
        old = _aligned(kept, stay, before).select(self.numbered_schema.names)
        old = old.take(pa.array(at))
        out = out.select(self.numbered_schema.names).cast(self.numbered_schema)
        same = (published >= 0) & _equal_rows(out, old)
        first = (published < 0) & (step1 == 0)
        revision = np.where(
            same, published, np.where(published >= 0, np.maximum(published + 1, step1), step1)
        )
        again = ~same & ~first
        release = np.concatenate([_us(stay, KEPT_RELEASE), _us(fresh, RELEASE_AT)])[at]
        leaving = self._leaving(out, release, ctx.watermark_after)
        revisions = pa.concat_tables(
            [
                _revision_rows(out.filter(pa.array(again)), revision[again], self),
                self._retractions(rows, kept),
            ]
        )
        new_base = self._folded(base, out.filter(pa.array(leaving)))
        staying = ~leaving
        kept_rows = _kept_rows(out.filter(pa.array(staying)), revision[staying], release[staying])
        new_state = self._state_of(new_base, kept_rows)
        touched = pc.unique(rows.column(KEY).combine_chunks())
        handed = pc.unique(pa.concat_arrays([state.column(KEY).combine_chunks(), touched]))
        users_out = self._users(users, base, handed if ctx.every_key else touched)
        removed = self._removed(new_state, handed, touched, ctx)
        if not self.keeps_current:  # a change log says when a user has no session left
            users_out = pa.concat_tables([users_out, self._emptied(kept, touched, new_state)])
        new_state = new_state.filter(pc.invert(pc.is_in(new_state.column(KEY), value_set=removed)))
        deletes = {"users": pa.table({KEY: removed})} if self.keeps_current else None
        return Update(
            state=new_state,
            remove=removed,
            outputs={
                "sessions": out.filter(pa.array(first)),
                SESSION_REVISIONS: revisions,
                "users": users_out,
            },
            timers=self._timers(new_state),
            deletes=deletes,
            counters={
                "new_users": int(np.count_nonzero(first & _is_one(out))),
                "users_out": users_out.num_rows,
                "users_expired": len(removed),
            },
        )

    def _split(self, state: pa.Table) -> tuple[pa.Table, pa.Table]:
        """(the base rows, in the base schema; the kept rows as numbered sessions with
        their revision and release)."""
        is_kept = pc.is_valid(state.column(KEPT + "session_id"))
        base = state.filter(pc.invert(is_kept)).select(self.base_schema.names)
        kept = state.filter(is_kept)
        names = [KEPT + n if n != KEY else KEY for n in self.numbered_schema.names]
        table = kept.select([*names, KEPT_REVISION, KEPT_RELEASE])
        table = table.rename_columns([*self.numbered_schema.names, KEPT_REVISION, KEPT_RELEASE])
        schema = self.numbered_schema.append(pa.field(KEPT_REVISION, pa.int64())).append(
            pa.field(KEPT_RELEASE, TS)
        )
        return base.cast(self.base_schema), table.cast(schema)

    def _leaving(self, out: pa.Table, release: np.ndarray, watermark: int | None) -> np.ndarray:
        """Per numbered row (sorted by user, then numbering order): it leaves the kept
        rows now (its `release + window` passed, and every earlier one's of its user)."""
        n = out.num_rows
        if watermark is None or n == 0:
            return np.zeros(n, bool)
        due = release + self.window_us < watermark
        keys = out.column(KEY).combine_chunks()
        first = np.concatenate([[True], pc.not_equal(keys[1:], keys[:-1]).to_numpy(
            zero_copy_only=False)])  # fmt: skip
        # A prefix per user: the count of not-due rows so far within the user is zero.
        blocked = np.cumsum(~due)
        start = np.maximum.accumulate(np.where(first, np.arange(n), 0))
        before = np.where(start > 0, blocked[np.maximum(start - 1, 0)], 0)
        return due & (blocked - before == 0)

    def _folded(self, base: pa.Table, leaving: pa.Table) -> pa.Table:
        """The base rows with the leaving sessions folded in (their users' rows continued)."""
        if leaving.num_rows == 0:
            return base
        plain = leaving.select(self.sessions.names)
        _, folded = self.numbered(base, plain)
        rest = base.filter(pc.invert(pc.is_in(base.column(KEY), value_set=folded.column(KEY))))
        return pa.concat_tables([rest, folded.cast(self.base_schema)])

    def _state_of(self, base: pa.Table, kept: pa.Table) -> pa.Table:
        """Base and kept rows in the state's schema, sorted by user."""
        n_base, n_kept = base.num_rows, kept.num_rows
        columns = []
        for f in self.state_schema:
            top, bottom = pa.nulls(n_base, f.type), pa.nulls(n_kept, f.type)
            if f.name == KEY:
                top, bottom = base.column(KEY), kept.column(KEY)
            elif f.name in (KEPT_REVISION, KEPT_RELEASE):
                bottom = kept.column(f.name)
            elif f.name.startswith(KEPT):
                bottom = kept.column(f.name.removeprefix(KEPT))
            else:
                top = base.column(f.name)
            columns.append(pa.concat_arrays([_array(top, f.type), _array(bottom, f.type)]))
        table = pa.Table.from_arrays(columns, schema=self.state_schema)
        return table.sort_by(KEY) if table.num_rows else table

    def _retractions(self, rows: pa.Table, kept: pa.Table) -> pa.Table:
        """The published retractions: the first step's (not `moved`) of ids kept here,
        each one more than the revision it had."""
        target = self.outputs_schema(SESSION_REVISIONS)
        wanted = pc.and_(rows.column(RETRACTED), pc.invert(rows.column(MOVED)))
        gone = rows.filter(wanted)
        at = _lookup(kept, gone)
        had = kept.column(KEPT_REVISION).to_numpy(zero_copy_only=False)
        step1 = gone.column(REVISION).to_numpy(zero_copy_only=False)
        last = np.where(at >= 0, had[np.maximum(at, 0)] if len(had) else -1, -1)
        revision = np.maximum(last + 1, step1)
        given = {
            "session_id": gone.column("session_id"),
            REVISION: pa.array(revision, pa.int64()),
            RETRACTED: pa.array(np.ones(gone.num_rows, bool)),
            "anonymous_id": gone.column("anonymous_id"),
            "user_id": gone.column("user_id"),
            KEY: gone.column(KEY),
        }
        n = gone.num_rows
        columns = [
            _array(given[f.name], f.type) if f.name in given else pa.nulls(n, f.type)
            for f in target
        ]
        return pa.Table.from_arrays(columns, schema=target)

    def _users(self, users: pa.Table, base: pa.Table, keys: pa.Array) -> pa.Table:
        """The `users` rows of `keys`: base and kept sessions summed, or the base alone
        where none is kept."""
        names = self.outputs_schema("users").names
        numbered_users = users.filter(pc.is_in(users.column(KEY), value_set=keys))
        rest = base.filter(
            pc.and_(
                pc.is_in(base.column(KEY), value_set=keys),
                pc.invert(pc.is_in(base.column(KEY), value_set=users.column(KEY))),
            )
        )
        target = self.outputs_schema("users")
        return pa.concat_tables([numbered_users.select(names), rest.select(names)]).cast(target)

    def _emptied(self, kept: pa.Table, touched: pa.Array, state: pa.Table) -> pa.Table:
        """The `users` rows of the users touched now left with no session (each moved to
        another stitched user by a late login): `sessions` 0 and no events, with the
        starts of the sessions they had."""
        target = self.outputs_schema("users")
        gone = pc.invert(pc.is_in(touched, value_set=state.column(KEY)))
        emptied = touched.filter(gone)
        had = kept.filter(pc.is_in(kept.column(KEY), value_set=emptied))
        if had.num_rows == 0:
            return target.empty_table()
        starts = had.group_by(KEY, use_threads=False).aggregate(
            [("start_time", "min"), ("start_time", "max")]
        )
        n = starts.num_rows
        given = {
            KEY: starts.column(KEY),
            "first_session_start": starts.column("start_time_min"),
            "last_session_start": starts.column("start_time_max"),
        }
        columns = []
        for f in target:
            if f.name in given:
                columns.append(_array(given[f.name], f.type))
            elif pa.types.is_integer(f.type):
                columns.append(pa.array(np.zeros(n, np.int64), f.type))
            else:
                columns.append(pa.nulls(n, f.type))
        return pa.Table.from_arrays(columns, schema=target)

    def _removed(
        self, state: pa.Table, handed: pa.Array, touched: pa.Array, ctx: Context
    ) -> pa.Array:
        """The users handed in without a change and with no kept session whose timer
        fired (last event + TTL behind the watermark); and those left with nothing."""
        keys = state.column(KEY).combine_chunks()
        with_kept = pc.is_valid(state.column(KEPT + "session_id").combine_chunks())
        kept_keys = keys.filter(with_kept)
        gone = pc.invert(pc.is_in(handed, value_set=keys))  # neither base nor kept left
        nothing = handed.filter(gone)
        ttl, mark = self.rules.ttl_us, ctx.watermark_after
        if ttl is None or mark is None or state.num_rows == 0:
            return nothing
        last = state.column(LAST_EVENT).cast(pa.int64()).fill_null(NEVER_US).to_numpy(
            zero_copy_only=False)  # fmt: skip
        due = pa.array(last + ttl < mark)
        idle = pc.and_(pc.invert(pc.is_in(keys, value_set=touched)),
                       pc.invert(pc.is_in(keys, value_set=kept_keys)))  # fmt: skip
        expired = keys.filter(pc.and_(pc.and_(due, idle), pc.invert(with_kept)))
        return pa.concat_arrays([nothing, expired]).unique()

    def _timers(self, state: pa.Table) -> pa.Table:
        """Per user: the earliest of its kept sessions' `release + window` and its base
        row's last event + TTL (the core's "never" without either)."""
        keys = state.column(KEY).combine_chunks()
        if len(keys) == 0:
            return pa.table({KEY: keys, "at": pa.array([], pa.int64())})
        release = _us(state, KEPT_RELEASE)
        at = np.where(release >= 0, np.minimum(release + self.window_us, NEVER_US), NEVER_US)
        if self.rules.ttl_us is not None:
            last = _us(state, LAST_EVENT)
            due = np.minimum(last + self.rules.ttl_us, NEVER_US)
            at = np.minimum(at, np.where(last >= 0, due, NEVER_US))
        table = pa.table({KEY: keys, "at": pa.array(at, pa.int64())})
        low = table.group_by(KEY, use_threads=False).aggregate([("at", "min")])
        return low.rename_columns([KEY, "at"]).select([KEY, "at"])


def _pairs(keys, ids) -> pa.Array:
    """(user, session id) pairs as one string each, for membership tests."""
    joined = pc.binary_join_element_wise(keys.cast(pa.string()), ids.cast(pa.string()), "\x1f")
    return joined.combine_chunks() if isinstance(joined, pa.ChunkedArray) else joined


def _lookup(kept: pa.Table, rows: pa.Table) -> np.ndarray:
    """Per row of `rows`: the index of the kept row of the same user and id (-1: none)."""
    at = pc.index_in(
        _pairs(rows.column(KEY), rows.column("session_id")),
        value_set=_pairs(kept.column(KEY), kept.column("session_id")),
    )
    return pc.fill_null(at, -1).to_numpy(zero_copy_only=False).astype(np.int64)


def _aligned(kept: pa.Table, stay: pa.Table, before: np.ndarray) -> pa.Table:
    """The rows last published, aligned with `stay` then the fresh sessions (`before`:
    each one's kept row, -1: none, a row of nulls)."""
    n = len(before)
    if kept.num_rows == 0:
        fresh = pa.Table.from_arrays([pa.nulls(n, f.type) for f in kept.schema], schema=kept.schema)
        return pa.concat_tables([stay, fresh])
    taken = kept.take(pa.array(np.maximum(before, 0)))
    mask = pa.array(before < 0)
    columns = [
        pc.if_else(mask, pa.nulls(n, f.type), taken.column(f.name).combine_chunks())
        for f in kept.schema
    ]
    return pa.concat_tables([stay, pa.Table.from_arrays(columns, schema=kept.schema)])


def _equal_rows(a: pa.Table, b: pa.Table) -> np.ndarray:
    """Per row: every column equal, two nulls counting as equal."""
    same = np.ones(a.num_rows, bool)
    for name in a.column_names:
        x, y = a.column(name), b.column(name).cast(a.schema.field(name).type)
        if pa.types.is_list(x.type) or pa.types.is_map(x.type) or pa.types.is_struct(x.type):
            xs, ys = x.to_pylist(), y.to_pylist()
            same &= np.array([p == q for p, q in zip(xs, ys, strict=True)], bool)
            continue
        equal = pc.fill_null(pc.equal(x, y), False)
        both = pc.and_(pc.is_null(x), pc.is_null(y))
        same &= pc.or_(equal, both).to_numpy(zero_copy_only=False)
    return same


def _revision_rows(rows: pa.Table, revision: np.ndarray, proc: RevisedUsersProcessor):
    target = proc.outputs_schema(SESSION_REVISIONS)
    table = rows.add_column(1, REVISION, pa.array(revision, pa.int64()))
    table = table.add_column(2, RETRACTED, pa.array(np.zeros(rows.num_rows, bool)))
    return table.select(target.names).cast(target)


def _kept_rows(out: pa.Table, revision: np.ndarray, release: np.ndarray) -> pa.Table:
    table = out.append_column(KEPT_REVISION, pa.array(revision, pa.int64()))
    return table.append_column(KEPT_RELEASE, pa.array(release, pa.int64()).cast(TS))


def _array(values, type_: pa.DataType) -> pa.Array:
    """`values` (an array or a chunked one) as one array of `type_`."""
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    return values.cast(type_)


def _us(table: pa.Table, name: str) -> np.ndarray:
    col = table.column(name).cast(TS).cast(pa.int64())
    return np.asarray(col.fill_null(-1).to_numpy(zero_copy_only=False), np.int64)


def _is_one(out: pa.Table) -> np.ndarray:
    return np.asarray(out.column("is_new_user").to_numpy(zero_copy_only=False), bool)
