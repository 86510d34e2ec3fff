"""Identity stitching: which user an anonymous id belongs to (docs/design.md, "Identity").

Per anonymous id the identity is the last non-null user id by event time, ties at one
event time broken by the user id's value (the greatest, as UTF-8 bytes), never by arrival
order, with the earliest and latest event time of the anonymous id (`first_seen`,
`last_seen`). `user_time` is the event time the user id was seen at: a later batch's
on-time event may be earlier than a stored one, and must not replace it then.

Both functions are folds by maximum and minimum, vectorized over a partition (pyarrow and
numpy, one sort), so their result depends neither on the order of the events nor on how
they are split into batches.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sessionize.base_schema import TS

KEY = "anonymous_id"
USER = "user_id"
USER_TIME = "user_time"
FIRST_SEEN = "first_seen"
LAST_SEEN = "last_seen"
TIME = "event_time"


def identity_schema(key_type: pa.DataType | None = None) -> pa.Schema:
    """An identity row: the anonymous id (a string unless `key_type` says), its user (null:
    none seen yet) and times."""
    return pa.schema(
        [
            pa.field(KEY, key_type or pa.string(), nullable=False),
            pa.field(USER, pa.string()),
            pa.field(USER_TIME, TS),
            pa.field(FIRST_SEEN, TS, nullable=False),
            pa.field(LAST_SEEN, TS, nullable=False),
        ]
    )


def merge(identities: pa.Table, events: pa.Table, ttl_us: int | None = None) -> pa.Table:
    """The identities of every anonymous id of `identities` or `events`, the events folded in.

    Args:
        identities: stored identity rows (`identity_schema`), at most one per anonymous id.
        events: `anonymous_id`, `event_time` (timestamp) and `user_id` (string, null when
            the visitor is not logged in), in any order, duplicates allowed.
        ttl_us: `--user-ttl`: only each id's latest span counts (`latest_span`).

    Returns:
        One identity row per anonymous id, sorted by it, in `identities`' schema.

    Example:
        >>> import datetime as dt
        >>> t = dt.datetime(2024, 1, 1, tzinfo=dt.UTC)
        >>> ev = pa.table({"anonymous_id": ["a", "a"], "event_time": pa.array([t, t], TS),
        ...                "user_id": [None, "u1"]})
        >>> merge(identity_schema().empty_table(), ev).column("user_id").to_pylist()
        ['u1']
    """
    identities, events = latest_span(identities, events, ttl_us)
    schema = identities.schema
    key_type = schema.field(KEY).type
    seen = pa.concat_tables(
        [
            identities.select([KEY, FIRST_SEEN, LAST_SEEN]),
            pa.table(
                {
                    KEY: events.column(KEY).cast(key_type),
                    FIRST_SEEN: events.column(TIME).cast(TS),
                    LAST_SEEN: events.column(TIME).cast(TS),
                }
            ),
        ],
        promote_options="default",
    )
    times = seen.group_by(KEY, use_threads=False).aggregate(
        [(FIRST_SEEN, "min"), (LAST_SEEN, "max")]
    )
    times = times.select([KEY, f"{FIRST_SEEN}_min", f"{LAST_SEEN}_max"])
    times = times.rename_columns([KEY, FIRST_SEEN, LAST_SEEN])
    users = _last_users(_candidates(identities, events, key_type))
    joined = times.join(users, KEY, join_type="left outer", use_threads=False)
    return joined.select(schema.names).cast(schema).sort_by(KEY)


def session_users(
    identities: pa.Table,
    keys: pa.Array,
    times: pa.Array,
    users: pa.Array,
    starts: np.ndarray,
    ends: np.ndarray,
    ttl_us: int | None = None,
) -> pa.Array:
    """The user id each session carries: the identity known when it is emitted.

    That is the fold of the anonymous id's stored identity (the events of its sessions
    emitted before) and of the events of this session and its earlier ones in the batch.

    Args:
        identities: stored identity rows (`identity_schema`), at most one per anonymous id.
        keys, times, users: the sessions' events, sorted by anonymous id and time, each
            session a run of them; `users` null where no user id was sent.
        starts, ends: each session's first and one-past-last event index, in the order
            of the events (so an anonymous id's sessions in start order).
        ttl_us: `--user-ttl`: a session that starts longer than this after the anonymous
            id's previous event (or stored `last_seen`) starts afresh, knowing no user
            from before (the TTL is at least the gap, so such a cut is between sessions).

    Returns:
        A string array, one user id per session, null where none is known yet.

    Example:
        >>> import datetime as dt
        >>> t = dt.datetime(2024, 1, 1, tzinfo=dt.UTC)
        >>> session_users(identity_schema().empty_table(), pa.array(["a", "a"]),
        ...     pa.array([t, t], TS), pa.array([None, "u1"]), np.array([0, 1]),
        ...     np.array([1, 2])).to_pylist()
        [None, 'u1']
    """
    n_sessions = len(starts)
    if n_sessions == 0:
        return pa.array([], pa.string())
    key_type = identities.schema.field(KEY).type
    events = pa.table({KEY: keys, TIME: times, USER: users})
    stored = identities.filter(pc.is_valid(identities.column(USER)))
    n_stored = stored.num_rows
    cands = pa.concat_tables(
        [
            pa.table(
                {
                    KEY: stored.column(KEY),
                    TIME: stored.column(USER_TIME).cast(TS),
                    USER: stored.column(USER),
                }
            ),
            pa.table({KEY: keys.cast(key_type), TIME: times.cast(TS), USER: users}),
        ],
        promote_options="default",
    )
    order = pc.sort_indices(cands, [(KEY, "ascending"), (TIME, "ascending"), (USER, "ascending")])
    # rank[i]: candidate i's place in (anonymous id, time, user id) order; -1: no user id.
    rank = np.empty(cands.num_rows, np.int64)
    rank[order.to_numpy()] = np.arange(cands.num_rows)
    valid = pc.is_valid(cands.column(USER)).to_numpy(zero_copy_only=False)
    rank[~valid] = -1
    event_rank = rank[n_stored:]
    own = np.maximum.reduceat(event_rank, starts) if events.num_rows else np.full(n_sessions, -1)
    session_keys = keys.take(pa.array(starts))
    at = pc.index_in(session_keys.cast(key_type), value_set=stored.column(KEY))
    at = at.fill_null(-1).to_numpy(zero_copy_only=False).astype(np.int64)
    base = np.where(at >= 0, rank[:n_stored][np.maximum(at, 0)] if n_stored else -1, -1)
    new_group = np.concatenate([[True], _new_run(session_keys)])
    if ttl_us is not None:
        fresh = _fresh_starts(identities, session_keys, times, starts, ends, ttl_us)
        # A fresh start forgets the stored identity for the id's sessions from there on.
        first = np.flatnonzero(new_group)
        owner = np.cumsum(new_group) - 1
        forgotten = np.cumsum(fresh) - np.concatenate([[0], np.cumsum(fresh)])[first][owner] > 0
        base = np.where(forgotten, -1, base)
        new_group = new_group | fresh
    # A running maximum per anonymous id (per span with a TTL): each group's values lifted
    # above every earlier group's.
    group = np.cumsum(new_group) - 1
    lift = group * (cands.num_rows + 1)
    best = np.maximum.accumulate(np.maximum(own, base) + 1 + lift) - lift - 1
    by_rank = cands.column(USER).take(order)
    picked = np.where(best >= 0, best, 0)
    return pc.if_else(pa.array(best >= 0), by_rank.take(pa.array(picked)), None)


def _fresh_starts(
    identities: pa.Table,
    session_keys: pa.Array,
    times: pa.Array,
    starts: np.ndarray,
    ends: np.ndarray,
    ttl_us: int,
) -> np.ndarray:
    """Per session: whether it starts longer than `ttl_us` after its anonymous id's
    previous event (its previous session's last, or the stored `last_seen`)."""
    t = times.cast(TS).cast(pa.int64()).to_numpy(zero_copy_only=False)
    start_us, end_us = t[starts], t[ends - 1]
    previous = np.concatenate([[0], end_us[:-1]])
    new_key = np.concatenate([[True], _new_run(session_keys)])
    key_type = identities.schema.field(KEY).type
    at = pc.index_in(session_keys.cast(key_type), value_set=identities.column(KEY))
    has = at.is_valid().to_numpy(zero_copy_only=False)
    last = identities.column(LAST_SEEN).cast(TS).cast(pa.int64()).to_numpy()
    stored_last = np.zeros(len(starts), np.int64)
    stored_last[has] = last[at.filter(at.is_valid()).to_numpy()]
    previous = np.where(new_key, stored_last, previous)
    known = np.where(new_key, has, True)
    return known & (start_us - previous > ttl_us)


def changed(before: pa.Table, after: pa.Table) -> pa.Table:
    """The rows of `after` whose user id, first or last seen differ from `before`'s row of
    the same anonymous id (or that `before` lacks): what a batch writes to `identities`,
    whose columns these are (a user id seen again later moves only `user_time`)."""
    old = before.rename_columns([f"old_{n}" for n in before.column_names])
    joined = after.join(old, KEY, f"old_{KEY}", join_type="left outer", use_threads=False)
    joined = joined.sort_by(KEY)
    same = pc.is_valid(joined.column(f"old_{FIRST_SEEN}"))
    for name in (USER, FIRST_SEEN, LAST_SEEN):
        a, b = joined.column(name), joined.column(f"old_{name}")
        equal = pc.or_kleene(pc.equal(a, b), pc.and_kleene(pc.is_null(a), pc.is_null(b))).fill_null(
            False
        )
        same = pc.and_(same, equal)
    return joined.filter(pc.invert(same)).select(after.schema.names)


def _candidates(identities: pa.Table, events: pa.Table, key_type: pa.DataType) -> pa.Table:
    """Every (anonymous id, time, user id) with a user id: the stored ones and the events'."""
    stored = pa.table(
        {
            KEY: identities.column(KEY),
            USER_TIME: identities.column(USER_TIME).cast(TS),
            USER: identities.column(USER),
        }
    )
    sent = pa.table(
        {
            KEY: events.column(KEY).cast(key_type),
            USER_TIME: events.column(TIME).cast(TS),
            USER: events.column(USER).cast(pa.string()),
        }
    )
    both = pa.concat_tables([stored, sent], promote_options="default")
    return both.filter(pc.is_valid(both.column(USER)))


def _last_users(cands: pa.Table) -> pa.Table:
    """Per anonymous id the candidate greatest by (time, user id)."""
    ordered = cands.sort_by([(KEY, "ascending"), (USER_TIME, "ascending"), (USER, "ascending")])
    if ordered.num_rows == 0:
        return ordered
    keys = ordered.column(KEY).combine_chunks()
    last = np.flatnonzero(np.concatenate([_new_run(keys), [True]]))
    return ordered.take(pa.array(last))


def _new_run(keys: pa.Array) -> np.ndarray:
    """For each adjacent pair of a sorted key array, whether the second starts a new key."""
    if len(keys) < 2:
        return np.zeros(0, bool)
    return pc.not_equal(keys[1:], keys[:-1]).to_numpy(zero_copy_only=False)


def latest_span(
    identities: pa.Table, events: pa.Table, ttl_us: int | None
) -> tuple[pa.Table, pa.Table]:
    """The stored identities and events of each anonymous id's latest span: a gap longer
    than `ttl_us` between two of its event times (the stored identity counting as its
    `last_seen`) starts a new span, and what came before is forgotten, as when the
    identity expired (`--user-ttl`). None: one span, nothing forgotten.

    Example:
        >>> import datetime as dt
        >>> t = dt.datetime(2024, 1, 1, tzinfo=dt.UTC)
        >>> ev = pa.table({"anonymous_id": ["a", "a"], "user_id": ["u1", None],
        ...     "event_time": pa.array([t, t + dt.timedelta(days=2)], TS)})
        >>> latest_span(identity_schema().empty_table(), ev, 86_400_000_000)[1].num_rows
        1
    """
    if ttl_us is None or identities.num_rows + events.num_rows == 0:
        return identities, events
    key_type = identities.schema.field(KEY).type
    n_stored = identities.num_rows
    points = pa.table(
        {
            KEY: pa.concat_arrays(
                [
                    identities.column(KEY).combine_chunks(),
                    events.column(KEY).cast(key_type).combine_chunks(),
                ]
            ),
            TIME: pa.concat_arrays(
                [
                    identities.column(LAST_SEEN).cast(TS).combine_chunks(),
                    events.column(TIME).cast(TS).combine_chunks(),
                ]
            ),
        }
    )
    order = pc.sort_indices(points, [(KEY, "ascending"), (TIME, "ascending")]).to_numpy()
    keys = points.column(KEY).combine_chunks().take(pa.array(order))
    times = points.column(TIME).cast(pa.int64()).to_numpy()[order]
    new_key = np.concatenate([[True], _new_run(keys)])
    gap = np.concatenate([[0], np.diff(times)])
    starts = new_key | (gap > ttl_us)
    span = np.cumsum(starts)
    key_index = np.cumsum(new_key) - 1
    last_span = np.maximum.reduceat(span, np.flatnonzero(new_key))
    kept_sorted = span == last_span[key_index]
    kept = np.empty(len(order), bool)
    kept[order] = kept_sorted
    return (
        identities.filter(pa.array(kept[:n_stored])),
        events.filter(pa.array(kept[n_stored:])),
    )
