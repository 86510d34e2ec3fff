"""What a partition holds at a committed version: its rows, read through the public store
API, in a canonical order; their content hash; the open sessions they make up."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from sessionize.config import SessionRules
from sessionize.logic import advance
from sessionize.schema import EVENT, SESSIONS, STATE, STATE_EXPIRY, STATE_KEY
from sessionize.state import StateBackend

# Every key expires before this (9999-12-31): `expiring(FAR_FUTURE_US)` lists all keys.
FAR_FUTURE_US = 253_402_214_400_000_000
# What `advance` compares closed_at with to hand back every open session.
_EMIT_ALL_US = np.iinfo(np.int64).max
_SORT = [(name, "ascending") for name in STATE.names]
PENDING = "pending_events"
PENDING_TYPE = pa.list_(pa.struct([f for f in EVENT if f.name != STATE_KEY]))


@dataclass(frozen=True)
class PartitionContents:
    partition: int
    version: int
    rows: pa.Table  # schema.STATE, canonical order
    meta: dict
    bytes: int  # the backend's measure of the state's size (Arrow bytes if it has none)

    @property
    def users(self) -> int:
        return len(pc.unique(self.rows[STATE_KEY]))


def read_partition(
    backend: StateBackend, job: str, partition: int, version: int
) -> PartitionContents:
    """Every row of `partition` at `version`; nothing is written."""
    with backend.open(job, partition, version) as tx:
        keys = tx.expiring(FAR_FUTURE_US)
        rows = tx.get_many(keys) if len(keys) else STATE.empty_table()
        size = tx.metrics().bytes
        meta = dict(tx.meta)
    rows = canonical(rows)
    return PartitionContents(partition, version, rows, meta, size or rows.nbytes)


def canonical(rows: pa.Table) -> pa.Table:
    """`rows` as schema.STATE in one order (every column ascending), whatever the backend."""
    rows = rows.select(STATE.names).cast(STATE)
    return rows.take(pc.sort_indices(rows, sort_keys=_SORT)).combine_chunks()


def content_hash(rows: pa.Table) -> str:
    """SHA-256 over the rows' values in canonical order (independent of chunking and of
    the backend's encoding)."""
    rows = canonical(rows)
    digest = hashlib.sha256(str(rows.num_rows).encode())
    if rows.num_rows:
        hashes = pd.util.hash_pandas_object(rows.to_pandas(), index=False)
        digest.update(hashes.to_numpy().tobytes())
    return digest.hexdigest()


def open_sessions(rows: pa.Table, rules: SessionRules) -> pa.Table:
    """The open sessions of `rows` as `sessions` rows (closed_at and end_reason as they will
    be if nothing more arrives), plus `expires_at` (the user's) and `pending_events`: the
    session's events as the state keeps them, in time order."""
    rows = canonical(rows)
    step = advance(
        rows, EVENT.empty_table(), rules=rules, watermark_before=None,
        watermark_after=_EMIT_ALL_US,
    )  # fmt: skip
    sessions = step.sessions
    # advance emits the sessions in (user, time, page) order, each a run of that many
    # consecutive events in the same order: the pending events are those runs.
    order = pc.sort_indices(rows, sort_keys=[("user_id", "ascending"),
                                             ("event_time", "ascending"), ("page", "ascending")])
    events = rows.take(order)
    counts = sessions["event_count"].to_numpy()
    offsets = pa.array(np.concatenate([[0], np.cumsum(counts)]).astype(np.int32))
    fields = [f.name for f in PENDING_TYPE.value_type]
    struct = pa.StructArray.from_arrays(
        [events[n].combine_chunks() for n in fields], fields=list(PENDING_TYPE.value_type)
    )
    starts = pa.array(offsets.to_numpy()[:-1])
    expires = events[STATE_EXPIRY].take(starts) if len(sessions) else events[STATE_EXPIRY]
    out = sessions.append_column(STATE_EXPIRY, expires)
    return out.append_column(PENDING, pa.ListArray.from_arrays(offsets, struct))


EXPORT_SCHEMA = SESSIONS.append(pa.field(STATE_EXPIRY, STATE.field(STATE_EXPIRY).type)).append(
    pa.field(PENDING, PENDING_TYPE)
)
