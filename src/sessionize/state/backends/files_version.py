"""A partition of the `files` store at one version (`files.py`): loaded in full, so that
reads are in-memory index lookups."""

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
    """A partition loaded in full: reads are in-memory index lookups (no I/O)."""

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
        self.token = record.token if record else None
        self.depth = record.depth if record else 0
        self.chain_rows = record.chain_rows if record else 0
        self.state = state
        self.metrics.keys = record.keys if record else 0
        self.metrics.bytes = record.bytes if record else 0

    def _read_rows(self, keys: pa.Int64Array) -> pa.Table:
        return self.state.read(keys.to_numpy(zero_copy_only=False))

    def _read_expiring(self, upto_us: int) -> pa.Int64Array:
        return pa.array(self.state.expiring(upto_us), pa.int64())

    def close(self) -> None:
        self.state = LayeredState.empty(self.spec)
