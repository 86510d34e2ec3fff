"""One (job, partition) at one committed version: the storage primitives a backend implements.

The transaction (`transaction.py`) reads through these and publishes its writes with
`write`; the base class owns the checks every backend would otherwise repeat (reads of the
empty state, the hand-over of a commit to the backend).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, Protocol

import pyarrow as pa

from sessionize.state.metrics import StateMetrics
from sessionize.state.rows import EMPTY_VERSION, RowSpec, no_keys

# A version's `meta`: the JSON-able dict committed with it.
Meta = dict[str, Any]


class VersionWriter(Protocol):
    """What publishes the next version of a `StoredVersion`: its `StateBackend` (whose
    `_commit` takes the versions of its own kind, hence `Any`)."""

    spec: RowSpec

    def _commit(
        self, stored: Any, version: int, puts: pa.Table, removes: pa.Int64Array, meta: Meta
    ) -> None: ...


class StoredVersion(ABC):
    """Storage primitives for one (job, partition) opened at one committed version.

    Made by `StateBackend._open_version`; used by exactly one transaction, from one thread.
    The transaction only asks for keys it has not staged itself, passes unique non-null
    keys, and calls `write` at most once. Implementations update `self.metrics`
    (rows_loaded, round_trips, bytes_read, keys, bytes, ...); timing is done by the caller.
    """

    def __init__(
        self, backend: VersionWriter, job: str, partition: int, version: int, meta: dict[str, Any]
    ):
        self.backend = backend
        self.spec = backend.spec
        self.job = job
        self.partition = partition
        self.version = version
        self.meta = meta
        self.metrics = StateMetrics(version=version)
        # The lease epoch of the driver that will commit on top of this version (None:
        # unfenced, e.g. tools and tests); set by StateBackend.open.
        self.epoch: int | None = None

    def read_rows(self, keys: pa.Int64Array) -> pa.Table:
        """All rows of `keys` at this version (spec.schema). Keys that have no rows are
        simply absent."""
        if self.version == EMPTY_VERSION or not len(keys):
            return self.spec.empty()
        return self._read_rows(keys)

    def read_expiring(self, upto_us: int) -> pa.Int64Array:
        """The unique keys having a row whose expiry is strictly before `upto_us`
        (microseconds since the epoch, UTC)."""
        if self.version == EMPTY_VERSION:
            return no_keys()
        return self._read_expiring(upto_us)

    def write(
        self, version: int, puts: pa.Table, removes: pa.Int64Array, meta: dict[str, Any]
    ) -> None:
        """Publish `version` on top of this one: see `StateBackend._commit`."""
        self.backend._commit(self, version, puts, removes, meta)

    @abstractmethod
    def _read_rows(self, keys: pa.Int64Array) -> pa.Table:
        """`read_rows` of a committed version and at least one key, in as few round trips
        as the storage allows (one call for many keys, never one per key)."""

    @abstractmethod
    def _read_expiring(self, upto_us: int) -> pa.Int64Array:
        """`read_expiring` of a committed version, without scanning the whole state where
        the storage can index expiry."""

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release anything held for this version (called once the transaction ends)."""
