"""The state store interface (DESIGN §5 "Our state store").

Three layers, as in quix-streams' state package:

- `StateBackend` (the store): one per URI; opens a (job, partition) at a committed version,
  lists and cleans up versions, and keeps the job-level commit log written by the driver.
- `StoredVersion` (the partition at one version): the small set of storage primitives a
  backend implements -- read the rows of many keys, read the keys expiring before a time,
  write the next version -- each one batched (one call for many keys, never one per key).
- `PartitionState` (the transaction, in `transaction.py`): shared code that every backend
  gets for free -- the read-your-writes buffer, removes kept apart from puts, the
  open -> committed/aborted/failed state machine, metrics.

Versions are non-negative integers chosen by the caller (the micro-batch id, or the hour in
batch mode); `-1` names the empty state before the first commit. Reads see exactly the
version that was opened. `commit(version)` publishes atomically and is idempotent per
version: committing V again (a re-executed batch) replaces V, never adds to it, and
supersedes every version after the one the transaction was opened at -- a partition's
history is a single line.

Rows are generic Arrow tables described by a `RowSpec`: a schema with an int64 key column
and a timestamp (us, UTC) expiry column; `schema.STATE` is the default. A key's rows are
always replaced together; a key expires when the earliest expiry among its rows is before
the time asked.

A backend pickles as its configuration (`uri` plus a non-default `RowSpec`), never as a
live handle, because Spark ships it to executors.

Implementing a backend: subclass `StateBackend` and `StoredVersion`, implement the methods
marked abstract, register the URI scheme in `registry.py`, and add a fixture that runs
`tests/state/contract.py`.
"""

from __future__ import annotations

import functools
import re
from abc import ABC, abstractmethod
from dataclasses import asdict, dataclass, field, fields
from time import perf_counter
from typing import TYPE_CHECKING, Any, ClassVar

import pyarrow as pa

from sessionize.config import redact_uri
from sessionize.errors import ConfigError, StateError
from sessionize.schema import STATE, STATE_EXPIRY, STATE_KEY

if TYPE_CHECKING:
    from sessionize.state.transaction import PartitionState

EMPTY_VERSION = -1
"""The version of the empty state, before the first commit of a partition."""

_JOB_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._=-]{0,199}$")
_TS_US_UTC = pa.timestamp("us", tz="UTC")


@dataclass(frozen=True)
class RowSpec:
    """What the rows of a state look like: an Arrow schema, its key and its expiry column.

    The key column is int64 and never null; the expiry column is timestamp(us, UTC) and
    never null. Every other column is opaque to the store.
    """

    schema: pa.Schema = STATE
    key: str = STATE_KEY
    expiry: str = STATE_EXPIRY

    def __post_init__(self) -> None:
        names = self.schema.names
        if self.key not in names or self.schema.field(self.key).type != pa.int64():
            raise ConfigError(f"state schema needs an int64 key column '{self.key}'")
        if self.expiry not in names or self.schema.field(self.expiry).type != _TS_US_UTC:
            raise ConfigError(
                f"state schema needs a timestamp[us, tz=UTC] expiry column '{self.expiry}'"
            )
        if len(set(names)) != len(names):
            raise ConfigError("state schema has duplicate column names")

    @property
    def is_default(self) -> bool:
        return self == RowSpec()

    def empty(self) -> pa.Table:
        """An empty table of the schema (shared: tables are immutable; building one costs ms)."""
        return self._empty

    @functools.cached_property
    def _empty(self) -> pa.Table:
        return self.schema.empty_table()

    def conform(self, rows: pa.Table | pa.RecordBatch) -> pa.Table:
        """`rows` with exactly this schema (columns selected by name and cast), checked for
        null keys and expiries. Raises StateError naming what is wrong."""
        if isinstance(rows, pa.RecordBatch):
            rows = pa.Table.from_batches([rows])
        if not isinstance(rows, pa.Table):
            raise StateError(f"state rows must be a pyarrow Table, not {type(rows).__name__}")
        missing = [n for n in self.schema.names if n not in rows.column_names]
        if missing:
            raise StateError(f"state rows lack column(s) {missing}")
        try:
            table = rows.select(self.schema.names).cast(self.schema)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, ValueError) as e:
            raise StateError(f"state rows do not match the state schema: {e}") from e
        for name in (self.key, self.expiry):
            if table.column(name).null_count:
                raise StateError(f"state rows have null values in '{name}'")
        return table


def as_keys(keys: Any) -> pa.Int64Array:
    """Many keys as a unique, non-null int64 Arrow array (from an Arrow array, chunked
    array, numpy array or a list)."""
    if isinstance(keys, pa.ChunkedArray):
        keys = keys.combine_chunks()
    if not isinstance(keys, pa.Array):
        try:
            keys = pa.array(keys, type=pa.int64())
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError) as e:
            raise StateError(f"state keys must be integers: {e}") from e
    if keys.type != pa.int64():
        try:
            keys = keys.cast(pa.int64())
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
            raise StateError(f"state keys must be int64, not {keys.type}") from e
    if keys.null_count:
        raise StateError("state keys must not be null")
    return keys.unique()


@dataclass
class StateMetrics:
    """What one partition transaction did. Summable across partitions with `+`.

    `keys` and `bytes` describe the state itself (after the commit once committed, else as
    loaded) and are None when a backend cannot know them without a scan. `bytes` is the
    backend's measure of the state's size (in-memory Arrow bytes for `files`).
    `rows_loaded` counts rows read from storage (0 when a cache served the version);
    `round_trips` counts storage calls (file operations, network requests).
    """

    version: int = EMPTY_VERSION
    committed_version: int | None = None
    keys: int | None = 0
    bytes: int | None = 0
    load_ms: float = 0.0
    read_ms: float = 0.0
    commit_ms: float = 0.0
    rows_loaded: int = 0
    rows_returned: int = 0
    rows_put: int = 0
    keys_removed: int = 0
    rows_written: int = 0
    bytes_read: int = 0
    bytes_written: int = 0
    round_trips: int = 0
    cache_hits: int = 0
    snapshots: int = 0
    extra: dict[str, Any] = field(default_factory=dict)

    _NOT_SUMMED: ClassVar[tuple[str, ...]] = ("version", "committed_version", "extra")

    def __add__(self, other: StateMetrics) -> StateMetrics:
        out = StateMetrics(version=max(self.version, other.version))
        cv = [v for v in (self.committed_version, other.committed_version) if v is not None]
        out.committed_version = max(cv) if cv else None
        for f in fields(self):
            if f.name in self._NOT_SUMMED:
                continue
            a, b = getattr(self, f.name), getattr(other, f.name)
            setattr(out, f.name, None if a is None or b is None else a + b)
        out.extra = {**self.extra, **other.extra}
        return out

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


class StoredVersion(ABC):
    """Storage primitives for one (job, partition) opened at one committed version.

    Made by `StateBackend._open_version`; used by exactly one transaction, from one thread.
    The transaction only asks for keys it has not staged itself, passes unique non-null
    keys, and calls `write` at most once. Implementations update `self.metrics`
    (rows_loaded, round_trips, bytes_read, keys, bytes, ...); timing is done by the caller.
    """

    def __init__(self, job: str, partition: int, version: int, meta: dict, spec: RowSpec):
        self.job = job
        self.partition = partition
        self.version = version
        self.meta = meta
        self.spec = spec
        self.metrics = StateMetrics(version=version)

    @abstractmethod
    def read_rows(self, keys: pa.Int64Array) -> pa.Table:
        """All rows of `keys` at this version (spec.schema), in as few round trips as the
        storage allows. Keys that have no rows are simply absent."""

    @abstractmethod
    def read_expiring(self, upto_us: int) -> pa.Int64Array:
        """The unique keys having a row whose expiry is strictly before `upto_us`
        (microseconds since the epoch, UTC), without scanning the whole state where the
        storage can index expiry."""

    @abstractmethod
    def write(self, version: int, puts: pa.Table, removes: pa.Int64Array, meta: dict) -> None:
        """Publish `version` = this version, with all rows of each key in `puts` replaced by
        its rows there and the keys in `removes` (disjoint from the keys of `puts`) deleted,
        plus `meta` (a JSON-able dict), atomically: after a crash either the whole version is
        visible or none of it. `version` > `self.version`. Idempotent: if `version` is
        already committed it is replaced, never merged. Every other committed version after
        `self.version` is superseded and must stop being restorable. Empty puts and removes
        still publish the version."""

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release anything held for this version (called once the transaction ends)."""


class StateBackend(ABC):
    """A versioned, batched state store for many (job, partition) pairs.

    Subclasses implement the abstract storage primitives; `open`, `maintenance` and
    `truncate_after` are shared logic on top of them and should not be overridden.
    """

    scheme: ClassVar[str]

    def __init__(self, spec: RowSpec | None = None):
        self.spec = spec or RowSpec()

    # ----- configuration --------------------------------------------------------------

    @property
    @abstractmethod
    def uri(self) -> str:
        """The canonical URI, options included: `open_backend(b.uri)` rebuilds `b` (with a
        default RowSpec)."""

    @classmethod
    @abstractmethod
    def from_uri(cls, uri: str, spec: RowSpec | None = None) -> StateBackend:
        """Build from a URI of this backend's scheme; ConfigError on anything unknown."""

    def __reduce__(self):
        from sessionize.state.registry import open_backend

        if self.spec.is_default:
            return (open_backend, (self.uri,))
        return (open_backend, (self.uri, self.spec))

    @property
    def redacted_uri(self) -> str:
        """The URI without its password, for messages and reprs."""
        return redact_uri(self.uri)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.redacted_uri!r})"

    @abstractmethod
    def check(self) -> None:
        """Raise StateError with one clear line if the store is unreachable or unusable."""

    # ----- partitions: shared logic ----------------------------------------------------

    def open(self, job: str, partition: int, version: int) -> PartitionState:
        """A transaction on `partition` of `job`, reading exactly `version` (-1 = empty).

        StateError if `version` is not committed or no longer restorable.
        """
        from sessionize.state.transaction import PartitionState

        check_job(job)
        check_partition(partition)
        check_version(version, allow_empty=True)
        t0 = perf_counter()
        stored = self._open_version(job, partition, version)
        stored.metrics.load_ms += (perf_counter() - t0) * 1000
        return PartitionState(stored)

    def maintenance(self, job: str, partition: int, retain: int) -> None:
        """Keep the last `retain` committed versions of the partition restorable and delete
        what is not needed for them. Older versions may survive when a retained version is
        built on them (e.g. deltas on an older snapshot)."""
        check_job(job)
        check_partition(partition)
        if not isinstance(retain, int) or isinstance(retain, bool) or retain < 1:
            raise ConfigError(f"retain must be a positive number of versions, not {retain!r}")
        versions = self.versions(job, partition)
        if not versions:
            return
        keep_from = versions[-retain] if len(versions) >= retain else versions[0]
        self._maintain(job, partition, keep_from)

    def trim_job_records(self, job: str, retain: int) -> None:
        """Keep the newest `retain` job records; older versions are no longer restorable
        once `maintenance` has dropped their partition versions anyway."""
        check_job(job)
        if not isinstance(retain, int) or isinstance(retain, bool) or retain < 1:
            raise ConfigError(f"retain must be a positive number of versions, not {retain!r}")
        self._delete_job_records(job, self.job_versions(job)[:-retain])

    def truncate_after(self, job: str, version: int) -> None:
        """Forget the job records and every partition's versions after `version` (>= -1),
        for reprocessing from `version`. Job records go first, so that a crash half way
        leaves partition versions the driver no longer points at (superseded by the next
        commit), never a job record whose partition versions are gone. Idempotent."""
        check_job(job)
        check_version(version, allow_empty=True)
        self._delete_job_records(job, [v for v in self.job_versions(job) if v > version])
        for partition in self.partitions(job):
            self._truncate_partition(job, partition, version)

    # ----- storage primitives: partitions ---------------------------------------------

    @abstractmethod
    def _open_version(self, job: str, partition: int, version: int) -> StoredVersion:
        """The partition at a committed `version` (or the empty state for -1).
        StateError naming the job, partition and version if it is not restorable."""

    @abstractmethod
    def versions(self, job: str, partition: int) -> list[int]:
        """The committed, restorable versions of the partition, ascending."""

    @abstractmethod
    def partitions(self, job: str) -> list[int]:
        """The partitions of `job` that have any stored version, ascending."""

    @abstractmethod
    def _truncate_partition(self, job: str, partition: int, after: int) -> None:
        """Delete every version of the partition after `after`, newest first."""

    @abstractmethod
    def _maintain(self, job: str, partition: int, keep_from: int) -> None:
        """Delete what is not needed to restore the committed versions >= `keep_from`."""

    # ----- storage primitives: the job commit log --------------------------------------

    @abstractmethod
    def write_job_record(self, job: str, version: int, record: dict) -> None:
        """Store the driver's record (a JSON-able dict) for `version`; overwrites."""

    @abstractmethod
    def read_job_record(self, job: str, version: int) -> dict | None:
        """The record of `version`, or None if there is none."""

    @abstractmethod
    def job_versions(self, job: str) -> list[int]:
        """The versions that have a job record, ascending."""

    @abstractmethod
    def _delete_job_records(self, job: str, versions: list[int]) -> None:
        """Delete the job records of `versions` (newest first); missing ones are fine."""


def check_job(job: str) -> str:
    if not isinstance(job, str) or not _JOB_NAME.match(job):
        raise ConfigError(
            f"job name {job!r} must be 1-200 characters of letters, digits, '.', '_', '=', '-'"
            " and start with a letter or digit"
        )
    return job


def check_partition(partition: int) -> int:
    if not isinstance(partition, int) or isinstance(partition, bool) or partition < 0:
        raise ConfigError(f"partition must be a non-negative integer, not {partition!r}")
    return partition


def check_version(version: int, *, allow_empty: bool = False) -> int:
    low = EMPTY_VERSION if allow_empty else 0
    if not isinstance(version, int) or isinstance(version, bool) or version < low:
        raise StateError(f"version must be an integer >= {low}, not {version!r}")
    return version
