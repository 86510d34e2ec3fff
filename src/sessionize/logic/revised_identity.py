"""Identity with revisions (`--anonymous-field` with `--revise-within`; docs/design.md,
"Revisions" and "Identity"): the user each session of a re-cut carries, and the events of
the kept sessions that a batch set aside, which identity folds like the others.

With a window, an anonymous id's emitted sessions stay in its state as their events until
the watermark passes their `release + window`, so its identity row holds only the events
that have left the state (the dropped sessions'). A session's user is then the fold
(`identity.session_users`) of that row, of the set-aside kept sessions' events (which
precede every session of the cut of their id: `set_aside.py`) and of the events of this
session and the id's earlier ones in the cut: the identity a batch over every event gives
it when it is emitted. Pure and vectorized like the rest of the logic.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from sessionize.base_schema import SENT_USER, TS
from sessionize.logic import identity as ident
from sessionize.logic.result import SessionSpans
from sessionize.logic.set_aside import Aside

# `split` below is a `sessions._Split` (sessions.py imports this module): the cut sessions.


def spans(split, aside: Aside | None = None, watermark_after: int | None = None) -> SessionSpans:
    """The cut's sessions as runs of their events, with the user ids the events were sent
    with; `emitted`: the sessions whose events leave the state in this batch (with a
    window, the `split` of the sessions dropped). With `aside`, its rows' events too, split
    into those that leave the state now and those still kept."""
    rows = split.rows
    taken = pa.array(split.order)
    left = kept = None
    if aside is not None:
        events = aside_events(rows, aside)
        still = aside.kept(watermark_after)
        left, kept = events.filter(pa.array(~still)), events.filter(pa.array(still))
    return SessionSpans(
        keys=rows["user_id"].combine_chunks().take(taken),
        times=pa.array(split.time, pa.int64()).view(TS),
        sent=rows[SENT_USER].combine_chunks().take(taken),
        starts=split.starts,
        ends=split.ends + 1,
        emitted=split.emitted,
        aside_left=left,
        aside_kept=kept,
    )


def aside_events(rows: pa.Table, aside: Aside | None) -> pa.Table:
    """The set-aside rows' events as `identity.merge` takes them (none without `aside`)."""
    at = pa.array(np.zeros(0, np.int64) if aside is None else aside.rows, pa.int64())
    return pa.table(
        {
            ident.KEY: rows["user_id"].combine_chunks().take(at),
            ident.TIME: rows["event_time"].combine_chunks().take(at).cast(TS),
            ident.USER: rows[SENT_USER].combine_chunks().take(at),
        }
    )


def revised_users(
    split,
    rows: pa.Table,
    aside: Aside | None,
    identities: pa.Table | None,
    ttl_us: int | None,
) -> pa.Array:
    """Per session of the cut `split`: the user id known at its emission over every event
    (null: none yet), from the stored identity rows `identities` (the events that left the
    state; None: none stored), the set-aside rows of `aside` and the cut's events."""
    key_type = rows.schema.field("user_id").type
    shape = ident.identity_schema(key_type)
    stored = shape.empty_table() if identities is None else identities.cast(shape)
    base = ident.merge(stored, aside_events(rows, aside), ttl_us)
    runs = spans(split)
    users = ident.session_users(
        base, runs.keys, runs.times, runs.sent, runs.starts, runs.ends, ttl_us
    )
    return users.combine_chunks() if isinstance(users, pa.ChunkedArray) else users
