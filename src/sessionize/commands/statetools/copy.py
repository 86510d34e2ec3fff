"""Copy a job's state at one committed version into another store, optionally with its
users rehashed into another number of partitions, and verify the copy.

Only the public store API is used: reads through `StateBackend.open` (never committed),
writes as one transaction per target partition opened on the empty state and committed
as the same version, then the job's settings (with the target's partitions) and the job
record of that version. Every step replaces what an
interrupted earlier copy left, so a copy can be rerun after a crash at any point; the
source is only read.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sessionize.commands.statetools.contents import (
    Shape,
    StoredRows,
    canonical,
    content_hash,
    key_column,
    open_sessions,
    read_partition,
)
from sessionize.config import SessionRules
from sessionize.errors import StateError
from sessionize.faults import pause_point
from sessionize.schema import layout
from sessionize.state import EMPTY_VERSION, StateBackend

# user ids, partition count -> each user's partition, as the engine places them
Assign = Callable[[pa.Array, int], np.ndarray]


@dataclass(frozen=True)
class Copied:
    """What one target partition received, as verified by reading it back."""

    partition: int
    users: int
    rows: int
    hash: str


@dataclass(frozen=True)
class CopyResult:
    version: int
    partitions: list[Copied]
    seconds: float

    @property
    def users(self) -> int:
        return sum(p.users for p in self.partitions)


def copy_state(
    source: StateBackend,
    target: StateBackend,
    job: str,
    version: int,
    *,
    partitions_in: int,
    partitions_out: int,
    rules: SessionRules | None,
    shape: Shape | None = None,
    assign: Assign | None = None,
    on_line: Callable[[str], None] = print,
) -> CopyResult:
    """Copy version `version` of `job` from `source` to `target` and verify it. With
    `assign`, users are placed into `partitions_out` partitions by it; without, partition
    P goes to P (then `partitions_out` must equal `partitions_in`). `shape` is the job's
    layout (its mapping's user id type and kept attributes), or a processor's stored rows
    (then `rules` is None)."""
    t0 = time.perf_counter()
    shape = shape or layout()
    record = source.read_job_record(job, version)
    if record is None:
        raise StateError(f"state {source.redacted_uri} has no record of version {version}")
    record = {k: v for k, v in record.items() if k != "settings"}  # kept once, beside it
    settings = _with_partitions(source.recorded_settings(job), partitions_out)
    check_target(target, job, version, record)
    parts = [read_partition(source, job, p, version, shape) for p in range(partitions_in)]
    on_line(
        f"read {sum(p.users for p in parts):,} open users from {partitions_in} partition(s)"
        f" of {source.redacted_uri} at version {version}"
    )
    tables = place_rows([p.rows for p in parts], partitions_out, assign, shape)
    for p, rows in enumerate(tables):
        meta = parts[p].meta if assign is None else partition_meta(rows, rules, shape)
        with target.open(job, p, EMPTY_VERSION) as tx:
            tx.put_many(rows)
            tx.commit(version, meta)
        pause_point("state-copy-partition", p)
    copied = verify(target, job, version, tables, shape)
    if settings is not None:
        target.write_job_settings(job, settings)
    target.write_job_record(job, version, record)  # last: the copy is whole
    on_line(f"wrote and verified {partitions_out} partition(s) of {target.redacted_uri}")
    return CopyResult(version, copied, time.perf_counter() - t0)


def verify(
    target: StateBackend,
    job: str,
    version: int,
    expected: list[pa.Table],
    shape: Shape | None = None,
) -> list[Copied]:
    """Read every partition back: same users, rows and content hash as `expected`."""
    out = []
    for p, rows in enumerate(expected):
        got = read_partition(target, job, p, version, shape)
        key = key_column(shape)
        want = Copied(p, len(pc.unique(rows[key])), rows.num_rows, content_hash(rows, shape))
        have = Copied(p, got.users, got.rows.num_rows, content_hash(got.rows, shape))
        if have != want:
            raise StateError(
                f"the copy of partition {p} in {target.redacted_uri} differs from the source "
                f"({have.users} users, {have.rows} rows; expected {want.users}, {want.rows}, "
                "or another content hash): the switch is not made; run the command again"
            )
        out.append(have)
    return out


def place_rows(
    tables: list[pa.Table], n: int, assign: Assign | None, shape: Shape | None = None
) -> list[pa.Table]:
    """The rows of `tables` (one per partition) in `n` partitions placed by `assign` (as
    they are without it). Users are placed by their id, as the engine places events: with
    string ids, users that share a stored key may land in different partitions."""
    if assign is None:
        return tables
    shape = shape or layout()
    rows = pa.concat_tables(tables).combine_chunks()
    if not rows.num_rows:
        return [shape.stored.empty_table() for _ in range(n)]
    key = key_column(shape)
    users = pc.unique(rows[key])
    where = assign(users, n)
    row_part = np.asarray(where)[pc.index_in(rows[key], users).to_numpy()]
    return [canonical(rows.filter(pa.array(row_part == p)), shape) for p in range(n)]


def partition_meta(rows: pa.Table, rules: SessionRules | None, shape: Shape | None = None) -> dict:
    """The counters the engine keeps per partition, recounted for rehashed rows (a
    processor's job, without `rules`, keeps none)."""
    if rules is None or isinstance(shape, StoredRows):
        return {}
    return {
        "open_sessions": open_sessions(rows, rules, shape).num_rows,
        "open_users": len(pc.unique(rows[key_column(shape)])),
    }


def _with_partitions(settings: dict | None, partitions: int) -> dict | None:
    if settings is not None and "partitions" in settings:
        return {**settings, "partitions": partitions}
    return settings


def check_target(target: StateBackend, job: str, version: int, record: dict) -> None:
    """The target must hold nothing of `job` but, at most, an earlier copy of this one."""
    target.check()
    versions = target.job_versions(job)
    if not versions:
        return
    if versions == [version] and target.read_job_record(job, version) == record:
        return  # an earlier run of this same copy: it is redone and verified again
    raise StateError(
        f"state {target.redacted_uri} already holds job '{job}' (versions "
        f"{versions[0]}..{versions[-1]}): copy into an empty place (another path, schema, "
        "prefix or table)"
    )
