"""The state store interface (see docs/design.md, 'State store').

Three layers, as in quix-streams' state package:

- `StateBackend` (the store, here): one per URI; opens a (job, partition) at a committed
  version, lists and cleans up versions, and keeps the job-level commit log written by the
  driver, and the job's settings. It checks every argument and encodes the job records
  and settings, so that a backend only implements storage primitives (the abstract
  methods, all starting with `_`).
- `StoredVersion` (the partition at one version, `stored.py`): the small set of batched
  storage primitives a backend implements -- read the rows of many keys, read the keys
  expiring before a time -- and the hand-over of a commit to `StateBackend._commit`.
- `PartitionState` (the transaction, `transaction.py`): shared code that every backend
  gets for free -- the read-your-writes buffer, removes kept apart from puts, the
  open -> committed/aborted/failed state machine, metrics.

Versions are non-negative integers chosen by the caller (the micro-batch id, or the hour in
batch mode); `-1` names the empty state before the first commit. Reads see exactly the
version that was opened. `commit(version)` publishes atomically and is idempotent per
version: committing V again (a re-executed batch) replaces V, never adds to it, and
supersedes every version after the one the transaction was opened at -- a partition's
history is a single line.

Rows are generic Arrow tables described by a `RowSpec` (`rows.py`): a schema with an int64
key column and a timestamp (us, UTC) expiry column; `schema.STATE` is the default. A key's
rows are always replaced together; a key expires when the earliest expiry among its rows is
before the time asked.

A backend pickles as its class and configuration (`from_uri` of its `uri`, plus a
non-default `RowSpec`), never as a live handle, because Spark ships it to executors.

Implementing a backend: subclass `StateBackend` and `StoredVersion`, implement the methods
marked abstract, register the URI scheme in `registry.py`, and add a fixture that runs
`tests/state/contract.py`.
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from time import perf_counter
from typing import Any, ClassVar, Generic, TypeVar, cast

import pyarrow as pa

from sessionize.errors import LeaseLost, StateError
from sessionize.redaction import redact_uri
from sessionize.state.rows import (
    RowSpec,
    check_job,
    check_partition,
    check_retain,
    check_version,
)
from sessionize.state.stored import Meta, StoredVersion
from sessionize.state.transaction import PartitionState

V = TypeVar("V", bound=StoredVersion)


class StateBackend(ABC, Generic[V]):
    """A versioned, batched state store for many (job, partition) pairs.

    The public methods check their arguments and are shared logic on top of the abstract
    storage primitives; subclasses implement the primitives and should not override the
    public methods.
    """

    scheme: ClassVar[str]

    def __init__(self, spec: RowSpec | None = None):
        self.spec = spec or RowSpec()

    # ----- configuration --------------------------------------------------------------

    @property
    @abstractmethod
    def uri(self) -> str:
        """The canonical URI, options included: `from_uri(b.uri)` rebuilds `b` (with a
        default RowSpec)."""

    @classmethod
    @abstractmethod
    def from_uri(cls, uri: str, spec: RowSpec | None = None) -> StateBackend[V]:
        """Build from a URI of this backend's scheme; ConfigError on anything unknown."""

    def __reduce__(self) -> tuple[Any, ...]:
        if self.spec.is_default:
            return (type(self).from_uri, (self.uri,))
        return (type(self).from_uri, (self.uri, self.spec))

    @property
    def redacted_uri(self) -> str:
        """The URI without its password, for messages and reprs."""
        return redact_uri(self.uri)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.redacted_uri!r})"

    @abstractmethod
    def check(self) -> None:
        """Raise StateError with one clear line if the store is unreachable or unusable."""

    # ----- partitions ------------------------------------------------------------------

    def open(
        self, job: str, partition: int, version: int, *, epoch: int | None = None
    ) -> PartitionState:
        """A transaction on `partition` of `job`, reading exactly `version` (-1 = empty).
        With `epoch` (the driver's lease epoch), its commit is rejected inside the store,
        with LeaseLost, once a newer epoch has fenced the job (`raise_fence`).

        StateError if `version` is not committed or no longer restorable.
        """
        check_job(job)
        check_partition(partition)
        check_version(version, allow_empty=True)
        t0 = perf_counter()
        stored = self._open_version(job, partition, version)
        stored.epoch = epoch
        stored.metrics.load_ms += (perf_counter() - t0) * 1000
        return PartitionState(stored)

    def versions(self, job: str, partition: int) -> list[int]:
        """The committed, restorable versions of the partition, ascending."""
        check_job(job)
        check_partition(partition)
        return self._versions(job, partition)

    def partitions(self, job: str) -> list[int]:
        """The partitions of `job` that have any stored version, ascending."""
        check_job(job)
        return self._partitions(job)

    def maintenance(self, job: str, partition: int, retain: int) -> None:
        """Keep the last `retain` committed versions of the partition restorable and delete
        what is not needed for them. Older versions may survive when a retained version is
        built on them (e.g. deltas on an older snapshot)."""
        check_job(job)
        check_partition(partition)
        check_retain(retain)
        versions = self._versions(job, partition)
        if not versions:
            return
        keep_from = versions[-retain] if len(versions) >= retain else versions[0]
        self._maintain(job, partition, keep_from)

    def truncate_after(self, job: str, version: int) -> None:
        """Forget the job records and every partition's versions after `version` (>= -1),
        for reprocessing from `version`. Job records go first, so that a crash half way
        leaves partition versions the driver no longer points at (superseded by the next
        commit), never a job record whose partition versions are gone. The job's settings
        stay. Idempotent."""
        check_job(job)
        check_version(version, allow_empty=True)
        self._delete_job_records(job, [v for v in self._job_versions(job) if v > version])
        for partition in self._partitions(job):
            self._truncate_partition(job, partition, version)

    # ----- fencing -------------------------------------------------------------------------

    def raise_fence(self, job: str, epoch: int, partitions: int) -> None:
        """Fence out every driver of `job` with an epoch below `epoch` (> 0): from now on
        the store rejects their partition commits (of partitions 0..`partitions`-1) and
        job records inside the write itself. The fence only moves up; LeaseLost if a newer
        epoch has fenced the job already."""
        check_job(job)
        if epoch < 1:
            raise StateError(f"a lease epoch is a positive integer, not {epoch!r}")
        fence = self._raise_fence(job, epoch, list(range(partitions)))
        if fence > epoch:
            raise fenced_error(job, epoch, fence)

    def fence(self, job: str) -> int:
        """The newest epoch that fenced `job` (0: none ever did)."""
        check_job(job)
        return self._read_fence(job)

    # ----- the job commit log ------------------------------------------------------------

    def write_job_record(
        self, job: str, version: int, record: dict[str, Any], *, epoch: int | None = None
    ) -> None:
        """Store the driver's record (a JSON-able dict) for `version`; overwrites. With
        `epoch`, LeaseLost (and nothing written) if a newer epoch fenced the job."""
        check_job(job)
        check_version(version)
        try:
            body = json.dumps(record, sort_keys=True, allow_nan=False)
        except (TypeError, ValueError) as e:
            raise StateError(f"job record of {job} version {version} is not JSON-able: {e}") from e
        self._write_job_record(job, version, body, epoch)

    def read_job_record(self, job: str, version: int) -> dict[str, Any] | None:
        """The record of `version`, or None if there is none."""
        check_job(job)
        check_version(version)
        body = self._read_job_record(job, version)
        if body is None:
            return None
        try:
            return cast(dict[str, Any], json.loads(body))
        except ValueError as e:
            raise StateError(
                f"job record {job}/{version} in {self.redacted_uri} is unreadable"
            ) from e

    def job_versions(self, job: str) -> list[int]:
        """The versions that have a job record, ascending."""
        check_job(job)
        return self._job_versions(job)

    def trim_job_records(self, job: str, retain: int) -> None:
        """Keep the newest `retain` job records; older versions are no longer restorable
        once `maintenance` has dropped their partition versions anyway."""
        check_job(job)
        check_retain(retain)
        self._delete_job_records(job, self._job_versions(job)[:-retain])

    # ----- the job's settings ------------------------------------------------------------

    def write_job_settings(
        self, job: str, settings: dict[str, Any], *, epoch: int | None = None
    ) -> None:
        """Store the job's settings (a JSON-able dict): one entry per job, beside its job
        records, which do not repeat them; overwrites. With `epoch`, LeaseLost (and nothing
        written) if a newer epoch fenced the job."""
        check_job(job)
        try:
            body = json.dumps(settings, sort_keys=True, allow_nan=False)
        except (TypeError, ValueError) as e:
            raise StateError(f"settings of job {job} are not JSON-able: {e}") from e
        self._write_job_settings(job, body, epoch)

    def read_job_settings(self, job: str) -> dict[str, Any] | None:
        """The job's settings entry, or None if there is none."""
        check_job(job)
        body = self._read_job_settings(job)
        if body is None:
            return None
        try:
            return cast(dict[str, Any], json.loads(body))
        except ValueError as e:
            raise StateError(f"settings of job {job} in {self.redacted_uri} are unreadable") from e

    def recorded_settings(self, job: str) -> dict[str, Any] | None:
        """The settings the job's state was written with: its settings entry or, in a store
        whose job records carry the settings instead, those of the newest record. None for
        a job without either."""
        settings = self.read_job_settings(job)
        if settings is not None:
            return settings
        versions = self._job_versions(job)
        record = self.read_job_record(job, versions[-1]) if versions else None
        return (record or {}).get("settings")

    # ----- storage primitives: partitions (arguments already checked) ------------------

    @abstractmethod
    def _open_version(self, job: str, partition: int, version: int) -> V:
        """The partition at a committed `version` (or the empty state for -1).
        StateError (`version_error`) if it is not restorable."""

    @abstractmethod
    def _commit(
        self, stored: V, version: int, puts: pa.Table, removes: pa.Int64Array, meta: Meta
    ) -> None:
        """Publish `version` = `stored`'s version with all rows of each key in `puts`
        replaced by its rows there and the keys in `removes` (disjoint from the keys of
        `puts`) deleted, plus `meta` (a JSON-able dict), atomically: after a crash either
        the whole version is visible or none of it. `version` > `stored.version`.
        Idempotent: if `version` is already committed it is replaced, never merged. Every
        other committed version after `stored.version` is superseded and must stop being
        restorable (`base_gone_error` if `stored.version` itself is gone). Empty puts and
        removes still publish the version. Updates `stored.metrics`."""

    @abstractmethod
    def _versions(self, job: str, partition: int) -> list[int]:
        """`versions` of the partition."""

    @abstractmethod
    def _partitions(self, job: str) -> list[int]:
        """`partitions` of the job."""

    @abstractmethod
    def _truncate_partition(self, job: str, partition: int, after: int) -> None:
        """Delete every version of the partition after `after`, newest first."""

    @abstractmethod
    def _maintain(self, job: str, partition: int, keep_from: int) -> None:
        """Delete what is not needed to restore the committed versions >= `keep_from`."""

    # ----- storage primitives: the job commit log --------------------------------------

    @abstractmethod
    def _write_job_record(self, job: str, version: int, body: str, epoch: int | None) -> None:
        """Store the record of `version` (JSON text); overwrites. Unless `epoch` is None,
        `fenced_error` instead if the job's fence is above it, checked in the write."""

    @abstractmethod
    def _read_job_record(self, job: str, version: int) -> str | bytes | None:
        """The JSON text of the record of `version`, or None if there is none."""

    @abstractmethod
    def _job_versions(self, job: str) -> list[int]:
        """`job_versions` of the job."""

    # ----- storage primitives: the job's settings ---------------------------------------

    @abstractmethod
    def _write_job_settings(self, job: str, body: str, epoch: int | None) -> None:
        """Store the job's settings (JSON text); overwrites. Unless `epoch` is None,
        `fenced_error` instead if the job's fence is above it, checked as for a job record."""

    @abstractmethod
    def _read_job_settings(self, job: str) -> str | bytes | None:
        """The JSON text of the job's settings, or None if there are none."""

    # ----- storage primitives: the fence -------------------------------------------------

    @abstractmethod
    def _raise_fence(self, job: str, epoch: int, partitions: list[int]) -> int:
        """Set the fence of the job and of each of `partitions` to max(fence, `epoch`),
        each atomically; return the job's fence afterwards. `_commit` rejects a
        `stored.epoch` below its partition's fence, in the same atomic step that publishes
        (a transaction, a script, a condition), or as the last read before it where the
        storage has no such step (then say so in the backend's doc)."""

    @abstractmethod
    def _read_fence(self, job: str) -> int:
        """The job's fence, 0 if none."""

    @abstractmethod
    def _delete_job_records(self, job: str, versions: list[int]) -> None:
        """Delete the job records of `versions` (newest first); missing ones are fine."""


def version_error(
    job: str,
    partition: int,
    version: int,
    *,
    have: list[int] | None = None,
    reason: str | None = None,
) -> StateError:
    """Version `version` cannot be opened: it was never committed or is no longer retained
    (`have`: the restorable versions), or it is committed but `reason` keeps it from being
    restored."""
    what = f"version {version} of state {job}/partition={partition}"
    if reason is not None:
        return StateError(f"{what} is not restorable: {reason}")
    span = f"restorable: {have[0]}..{have[-1]}" if have else "no version is committed"
    return StateError(f"{what} is not committed or no longer retained ({span})")


def fenced_error(job: str, epoch: int, fence: int) -> LeaseLost:
    """A write of a driver whose lease epoch `epoch` was fenced out by epoch `fence`."""
    return LeaseLost(
        f"state of job '{job}' was taken over by a newer driver (lease epoch {fence}, this "
        f"driver's {epoch}); this driver stops without committing (nothing is lost: the "
        "other driver continues the job)"
    )


def base_gone_error(job: str, partition: int, version: int, base: int) -> StateError:
    """A commit of `version` found the version it was built on, `base`, gone."""
    return StateError(
        f"cannot commit version {version} of {job}/partition={partition}: the version it was"
        f" built on, {base}, is no longer committed (truncated or re-committed meanwhile)"
    )
