"""Identity in the session processor (docs/design.md, "Identity"): an anonymous id's identity
row among its state rows, and what one batch makes of it.

The identity row holds the fold of the anonymous id's events that have left the state (those
of its emitted sessions); its open events are still state rows. So the current identity is
the fold of the row and the open events, and no event is counted twice. The row is an event
row of the layout's state (the key, `event_time` = last seen, an empty page and action, the
user in `sent_user_id`) marked by a non-null `identity_first_seen`, with the user's time in
`identity_user_time`: a state written with identity is read by every store and tool as it
is.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sessionize import schema
from sessionize.base_schema import (
    ANONYMOUS_ID,
    CARRIED_SESSION,
    IDENTITY_FIRST_SEEN,
    IDENTITY_USER_TIME,
    MOVED,
    RELEASE_AT,
    RETRACTED,
    REVISION,
    SENT_USER,
    STITCHED_USER_ID,
    TS,
)
from sessionize.logic import identity as ident
from sessionize.logic.result import SessionSpans, WrittenUsers

USER = schema.STATE_KEY


def split_state(state: pa.Table) -> tuple[pa.Table, pa.Table]:
    """(the state's rows that are not identity rows, the identities they hold)."""
    is_identity = pc.is_valid(state.column(IDENTITY_FIRST_SEEN))
    rows = state.filter(is_identity)
    identities = pa.table(
        {
            ident.KEY: rows.column(USER),
            ident.USER: rows.column(SENT_USER),
            ident.USER_TIME: rows.column(IDENTITY_USER_TIME),
            ident.FIRST_SEEN: rows.column(IDENTITY_FIRST_SEEN),
            ident.LAST_SEEN: rows.column("event_time"),
        }
    )
    key_type = state.schema.field(USER).type
    return state.filter(pc.invert(is_identity)), identities.cast(ident.identity_schema(key_type))


def identity_rows(identities: pa.Table, lay: schema.Layout) -> pa.Table:
    """The state rows (`lay.state_rows`) holding `identities`."""
    n = identities.num_rows
    given = {
        USER: identities.column(ident.KEY),
        "event_time": identities.column(ident.LAST_SEEN),
        "page": pa.array([""] * n, pa.string()),
        "action": pa.array([""] * n, pa.string()),
        SENT_USER: identities.column(ident.USER),
        IDENTITY_FIRST_SEEN: identities.column(ident.FIRST_SEEN),
        IDENTITY_USER_TIME: identities.column(ident.USER_TIME),
    }
    columns = [given.get(f.name, pa.nulls(n, f.type)) for f in lay.state_rows]
    return pa.Table.from_arrays(columns, schema=lay.state_rows)


@dataclass(frozen=True)
class Stitched:
    """What identity adds to one batch's step of the handed-in anonymous ids."""

    identities: pa.Table  # the identity rows to store: every id with a stored or left event
    changed: pa.Table  # the ids whose current user, first or last seen changed
    current: pa.Table  # every id's current identity (its open events folded in)
    emitted_users: pa.Array  # per emitted session (in `sessions` order): its user id
    open_users: pa.Array  # per open session (in `open_sessions` order): its user id


def stitch(
    stored: pa.Table,
    state_events: pa.Table,
    runs: SessionSpans,
    ttl_us: int | None = None,
    revised: bool = False,
) -> Stitched:
    """One batch of identity for the handed-in anonymous ids.

    Args:
        stored: their stored identities (`split_state`).
        state_events: their state rows before the batch, identity rows set apart (carry
            rows, which stand for emitted sessions, are not events).
        runs: every session of theirs after the batch (`advance`'s `runs`): those whose
            events leave the state are folded into the identity row.
        ttl_us: `--user-ttl` (None: identities are kept for ever): after a gap longer than
            this an anonymous id starts afresh (`identity.latest_span`).
        revised: with `--revise-within` the sessions' users come from `advance`
            (`StepResult.users`, logic/revised_identity.py): `emitted_users` and
            `open_users` are left empty.
    """
    no_users = pa.array([], pa.string())
    users = no_users
    if not revised:
        users = ident.session_users(
            stored, runs.keys, runs.times, runs.sent, runs.starts, runs.ends, ttl_us
        )
    emitted = runs.emitted
    left = _events(runs, _positions(runs.starts[emitted], runs.ends[emitted]))
    kept = _events(runs, _positions(runs.starts[~emitted], runs.ends[~emitted]))
    if runs.aside_left is not None and runs.aside_kept is not None:
        left = pa.concat_tables([left, runs.aside_left.cast(left.schema)])
        kept = pa.concat_tables([kept, runs.aside_kept.cast(kept.schema)])
    after = ident.merge(stored, left, ttl_us)
    if CARRIED_SESSION in state_events.column_names:
        state_events = state_events.filter(pc.is_null(state_events.column(CARRIED_SESSION)))
    before_events = pa.table(
        {
            ident.KEY: state_events.column(USER),
            ident.TIME: state_events.column("event_time"),
            ident.USER: state_events.column(SENT_USER),
        }
    )
    current_before = ident.merge(stored, before_events, ttl_us)
    current_after = ident.merge(after, kept, ttl_us)
    return Stitched(
        identities=after,
        changed=ident.changed(current_before, current_after),
        current=current_after,
        emitted_users=users.filter(pa.array(emitted)) if not revised else no_users,
        open_users=users.filter(pa.array(~emitted)) if not revised else no_users,
    )


def with_users(table: pa.Table, users: pa.Array, target: pa.Schema) -> pa.Table:
    """`sessions` or `open_sessions` rows of the session logic (keyed `user_id`) in
    `target`'s columns: the key as `anonymous_id`, the session's `user_id` and
    `stitched_user_id` (its user id, else the anonymous id as text)."""
    key = table.column(USER)
    stitched = pc.coalesce(users, key.cast(pa.string()))
    renamed = table.rename_columns([ANONYMOUS_ID if n == USER else n for n in table.column_names])
    renamed = renamed.append_column("user_id", users).append_column(STITCHED_USER_ID, stitched)
    return renamed.select(target.names).cast(target)


def keyed(table: pa.Table, target: pa.Schema) -> pa.Table:
    """An output of the session logic with its `user_id` named `anonymous_id`."""
    renamed = table.rename_columns([ANONYMOUS_ID if n == USER else n for n in table.column_names])
    return renamed.cast(target)


def _positions(starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """The event indices of the runs [start, end)."""
    if len(starts) == 0:
        return np.zeros(0, np.int64)
    lengths = ends - starts
    offsets = np.repeat(starts - np.concatenate([[0], np.cumsum(lengths)[:-1]]), lengths)
    return np.arange(int(lengths.sum())) + offsets


def _events(runs: SessionSpans, at: np.ndarray) -> pa.Table:
    taken = pa.array(at, pa.int64())
    return pa.table(
        {
            ident.KEY: runs.keys.take(taken),
            ident.TIME: runs.times.take(taken).cast(TS),
            ident.USER: runs.sent.take(taken),
        }
    )


def session_changes(
    first: pa.Table, again: pa.Table, written: WrittenUsers, target: pa.Schema
) -> pa.Table:
    """What the first step hands the users step with revisions (`target`:
    `Layout.session_changes`): the `sessions` rows `first` (revision 0) and the
    `session_revisions` rows `again`, each with its release, and for each revised session
    whose stitched user changed a `moved` retraction under the one it left, so that the
    users step keyed by stitched user takes it out of that user's sessions."""
    n = first.num_rows
    firsts = first.add_column(1, REVISION, pa.array(np.zeros(n, np.int64)))
    firsts = firsts.add_column(2, RETRACTED, pa.array(np.zeros(n, bool)))
    firsts = _with_change(firsts, np.zeros(n, bool), written.first_release)
    stitched = again.column(STITCHED_USER_ID).combine_chunks()
    left = pc.coalesce(written.previous, again.column(ANONYMOUS_ID).cast(pa.string()))
    retracted = again.column(RETRACTED).combine_chunks().to_numpy(zero_copy_only=False)
    differs = pc.fill_null(pc.not_equal(left, stitched), True).to_numpy(zero_copy_only=False)
    moved = written.had & ~retracted & differs
    at = pa.array(np.flatnonzero(moved))
    given = {
        "session_id": again.column("session_id").take(at),
        REVISION: again.column(REVISION).take(at),
        RETRACTED: pa.array(np.ones(len(at), bool)),
        ANONYMOUS_ID: again.column(ANONYMOUS_ID).take(at),
        "user_id": written.previous.take(at),
        STITCHED_USER_ID: left.take(at),
    }
    moves = pa.table(
        [given.get(f.name, pa.nulls(len(at), f.type)) for f in again.schema], schema=again.schema
    )
    return pa.concat_tables(
        [
            firsts.select(target.names).cast(target),
            _with_change(again, np.zeros(again.num_rows, bool), written.again_release)
            .select(target.names)
            .cast(target),
            _with_change(moves, np.ones(len(at), bool), np.full(len(at), -1))
            .select(target.names)
            .cast(target),
        ]
    )


def _with_change(rows: pa.Table, moved: np.ndarray, release: np.ndarray) -> pa.Table:
    """`rows` with `moved` and `release_at` (the epoch on a retraction, which has none:
    the users step's event time, never null)."""
    rows = rows.append_column(MOVED, pa.array(moved, pa.bool_()))
    at = pa.array(np.maximum(release, 0), pa.int64()).view(TS)
    return rows.append_column(RELEASE_AT, at)
