"""What a partition holds at a committed version: its rows, read through the public store
API, in a canonical order; their content hash; the open sessions they make up."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, replace

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from sessionize.base_schema import EMITTED_SESSION
from sessionize.config import SessionRules
from sessionize.core.declared import NEVER_US
from sessionize.logic import advance
from sessionize.logic.identity_step import split_state, stitch, with_users
from sessionize.schema import STATE_EXPIRY, Layout, layout
from sessionize.state import RowSpec, StateBackend

# Every key expires before this, a processor's key without a timer too (its "never" is
# 9999-12-31T23:59:59.999999Z): `expiring(FAR_FUTURE_US)` lists all keys.
FAR_FUTURE_US = NEVER_US + 1
# What `advance` compares closed_at with to hand back every open session.
_EMIT_ALL_US = np.iinfo(np.int64).max
PENDING = "pending_events"
# A user, whatever the layout: with string ids several users may share a stored key.
USER = "user_id"


@dataclass(frozen=True)
class StoredRows:
    """A stateful job's rows in the store, as the tools handle them: the store's row spec
    and the column one key is known by (the processor's key)."""

    spec: RowSpec
    key: str

    @property
    def stored(self) -> pa.Schema:
        return self.spec.schema


# What a job keeps per key: a session job's layout or a processor's stored rows.
Shape = Layout | StoredRows


def key_column(shape: Shape | None) -> str:
    """The column one key (a user, a processor's key) is known by."""
    return shape.key if isinstance(shape, StoredRows) else USER


@dataclass(frozen=True)
class PartitionContents:
    partition: int
    version: int
    rows: pa.Table  # the layout's stored rows, canonical order
    meta: dict
    bytes: int  # the backend's measure of the state's size (Arrow bytes if it has none)
    key: str = USER  # the column one key is known by

    @property
    def users(self) -> int:
        """Keys: users of a session job, a processor's keys."""
        return len(pc.unique(self.rows[self.key]))


def read_partition(
    backend: StateBackend, job: str, partition: int, version: int, shape: Shape | None = None
) -> PartitionContents:
    """Every row of `partition` at `version`; nothing is written."""
    shape = shape or layout()
    with backend.open(job, partition, version) as tx:
        keys = tx.expiring(FAR_FUTURE_US)
        rows = tx.get_many(keys) if len(keys) else shape.stored.empty_table()
        size = tx.metrics().bytes
        meta = dict(tx.meta)
    rows = canonical(rows, shape)
    return PartitionContents(partition, version, rows, meta, size or rows.nbytes, key_column(shape))


def canonical(rows: pa.Table, shape: Shape | None = None) -> pa.Table:
    """`rows` as the layout's stored rows in one order (every column that Arrow sorts
    ascending: not the nested ones, such as the users step's kept sessions' maps, which
    the key and the other columns already tell apart), whatever the backend."""
    stored = (shape or layout()).stored
    rows = rows.select(stored.names).cast(stored)
    order = [(f.name, "ascending") for f in stored if not pa.types.is_nested(f.type)]
    return rows.take(pc.sort_indices(rows, sort_keys=order)).combine_chunks()


def content_hash(rows: pa.Table, shape: Shape | None = None) -> str:
    """SHA-256 over the rows' values in canonical order (independent of chunking and of
    the backend's encoding)."""
    rows = canonical(rows, shape)
    digest = hashlib.sha256(str(rows.num_rows).encode())
    if rows.num_rows:
        hashes = pd.util.hash_pandas_object(rows.to_pandas(), index=False)
        digest.update(hashes.to_numpy().tobytes())
    return digest.hexdigest()


def pending_type(shape: Layout) -> pa.DataType:
    """A session's pending events: the event columns but the user's."""
    return pa.list_(pa.struct([f for f in shape.event if f.name != USER]))


def export_schema(shape: Layout) -> pa.Schema:
    """`sessions` rows of the layout, the user's expiry, the pending events."""
    expiry = pa.field(STATE_EXPIRY, shape.state.field(STATE_EXPIRY).type)
    return shape.sessions.append(expiry).append(pa.field(PENDING, pending_type(shape)))


def open_sessions(rows: pa.Table, rules: SessionRules, shape: Layout | None = None) -> pa.Table:
    """The open sessions of `rows` as `sessions` rows (closed_at and end_reason as they will
    be if nothing more arrives), plus `expires_at` (the user's) and `pending_events`: the
    session's events as the state keeps them, in time order. With identity, each session
    has the user its anonymous id's identity gives it so far, as the processor would."""
    shape = shape or layout()
    rows = canonical(rows, shape)
    if shape.revise:  # the emitted sessions kept for revisions are not open: left out
        rows = rows.filter(pc.is_null(rows.column(EMITTED_SESSION)))
        shape = replace(shape, revise=False)
        rules = replace(rules, revise_within_us=None)
    stored, logic = None, shape
    if shape.identity:  # an identity row holds no event: set apart, as the processor does
        rows, stored = split_state(rows)
        logic = shape.inner
    rows = rows.select(logic.state.names)
    step = advance(
        rows,
        logic.event.empty_table(),
        rules=rules,
        watermark_before=None,
        watermark_after=_EMIT_ALL_US,
        layout=logic,
    )
    sessions = step.sessions
    if stored is not None:
        assert step.runs is not None  # advance gives them on identity's inner layout
        users = stitch(stored, rows, step.runs, rules.user_ttl_us).emitted_users
        sessions = with_users(sessions, users, shape.sessions)
    # advance emits the sessions in (user, time, page) order, each a run of that many
    # consecutive events in the same order: the pending events are those runs.
    order = pc.sort_indices(
        rows, sort_keys=[(USER, "ascending"), ("event_time", "ascending"), ("page", "ascending")]
    )
    events = rows.take(order)
    counts = sessions["event_count"].to_numpy()
    offsets = pa.array(np.concatenate([[0], np.cumsum(counts)]).astype(np.int32))
    fields = list(pending_type(shape).value_type)
    struct = pa.StructArray.from_arrays(
        [events[f.name].combine_chunks() for f in fields], fields=fields
    )
    starts = pa.array(offsets.to_numpy()[:-1])
    expires = events[STATE_EXPIRY].take(starts) if len(sessions) else events[STATE_EXPIRY]
    out = sessions.append_column(STATE_EXPIRY, expires)
    return out.append_column(PENDING, pa.ListArray.from_arrays(offsets, struct))
