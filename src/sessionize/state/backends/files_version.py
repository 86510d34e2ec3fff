"""A partition of the `files` store at one version (`files.py`): loaded in full, so that
reads are in-memory index lookups, or over a lazy snapshot (`files_snapshot.py`), whose
reads count what they read into the version's metrics (and whose expiry index, once
built, the process cache accounts)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pyarrow as pa

from sessionize.state.backends.files_layout import CommitRecord
from sessionize.state.layered import LayeredState
from sessionize.state.rows import EMPTY_VERSION
from sessionize.state.stored import StoredVersion

if TYPE_CHECKING:
    from sessionize.state.backends.files import FilesBackend


class FilesVersion(StoredVersion):
    """A partition at one version: reads are in-memory index lookups, plus the snapshot's
    row groups they need when its base is lazy."""

    def __init__(
        self,
        backend: FilesBackend,
        job: str,
        partition: int,
        record: CommitRecord | None,  # None: the empty state
        state: LayeredState,
    ):
        version = record.version if record else EMPTY_VERSION
        super().__init__(backend, job, partition, version, record.meta if record else {})
        self.store = backend
        self.token = record.token if record else None
        self.depth = record.depth if record else 0
        self.chain_rows = record.chain_rows if record else 0
        self.state = state
        self.metrics.keys = record.keys if record else 0
        self.metrics.bytes = record.bytes if record else 0

    def _read_rows(self, keys: pa.Int64Array) -> pa.Table:
        try:
            return self.state.read(keys.to_numpy(zero_copy_only=False), self.metrics)
        except OSError as e:  # a lazy snapshot's storage failed
            raise self.store._failed("read", self._snapshot_path(), e) from e

    def _read_expiring(self, upto_us: int) -> pa.Int64Array:
        before = self.state.nbytes
        try:
            due = pa.array(self.state.expiring(upto_us, self.metrics), pa.int64())
        except OSError as e:
            raise self.store._failed("read", self._snapshot_path(), e) from e
        cache = self.store._cache
        if cache is not None and self.state.nbytes != before:  # a lazy base built its index
            cache.reaccount(self.store._cache_key(self.job, self.partition))
        return due

    def _snapshot_path(self) -> str:
        return str(getattr(self.state.base, "path", "the snapshot"))

    def close(self) -> None:
        self.state = LayeredState.empty(self.spec)
