"""The partition transaction: read-your-writes over a `StoredVersion`, shared by every backend.

A key is in exactly one of three states inside a transaction, and the buffer keeps them
apart so that "deleted" never looks like "not staged":

- PUT: its rows are staged in `WriteBuffer.puts`; reads return the staged rows.
- REMOVED: it is in `WriteBuffer.removed`; reads return nothing for it, without asking storage.
- UNTOUCHED: in neither; reads go to storage at the opened version.

Puts replace all rows of a key (a later put of the same key replaces the earlier one and
cancels a remove); a remove cancels a staged put. Both sets are Arrow arrays so that the
buffer works on whole batches of keys at once.

Transaction states: OPEN -> COMMITTED | ABORTED | FAILED. Any exception raised inside an
operation (storage or validation) moves it to FAILED for good: a failed transaction cannot
be read from or committed, only dropped. An empty transaction still commits its version,
because the version must advance with every batch.
"""

from __future__ import annotations

import datetime as dt
import enum
import functools
import json
from collections.abc import Callable
from time import perf_counter
from typing import Any, Concatenate, ParamSpec, TypeVar

import pyarrow as pa
import pyarrow.compute as pc

from sessionize.errors import SessionizeError, StateError
from sessionize.state.metrics import StateMetrics
from sessionize.state.rows import RowSpec, as_keys, check_version
from sessionize.state.stored import StoredVersion


class TxState(enum.Enum):
    OPEN = "open"
    COMMITTED = "committed"
    ABORTED = "aborted"
    FAILED = "failed"


class WriteBuffer:
    """Staged puts (Arrow rows, unique per key) and removed keys (kept apart)."""

    def __init__(self, spec: RowSpec):
        self.spec = spec
        self.puts: pa.Table = spec.empty()
        self.removed: pa.Int64Array = pa.array([], pa.int64())

    @property
    def put_keys(self) -> pa.Int64Array:
        return self.puts.column(self.spec.key).combine_chunks().unique()

    def put(self, rows: pa.Table) -> None:
        keys = rows.column(self.spec.key).combine_chunks().unique()
        kept = self.puts.filter(pc.invert(pc.is_in(self.puts.column(self.spec.key), keys)))
        self.puts = pa.concat_tables([kept, rows]).combine_chunks()
        self.removed = self.removed.filter(pc.invert(pc.is_in(self.removed, keys)))

    def remove(self, keys: pa.Int64Array) -> None:
        self.puts = self.puts.filter(pc.invert(pc.is_in(self.puts.column(self.spec.key), keys)))
        new = keys.filter(pc.invert(pc.is_in(keys, self.removed)))
        self.removed = pa.concat_arrays([self.removed, new])

    def staged_rows(self, keys: pa.Int64Array) -> pa.Table:
        """Staged rows of the PUT keys among `keys`."""
        return self.puts.filter(pc.is_in(self.puts.column(self.spec.key), keys))

    def untouched(self, keys: pa.Array) -> pa.Array:
        """The UNTOUCHED keys among `keys` (neither staged nor removed)."""
        shadowed = pc.or_(pc.is_in(keys, self.put_keys), pc.is_in(keys, self.removed))
        return keys.filter(pc.invert(shadowed))

    def expiring(self, upto_us: int) -> pa.Int64Array:
        expiry = self.puts.column(self.spec.expiry)
        mask = pc.less(expiry, pa.scalar(upto_us, expiry.type))
        return self.puts.filter(mask).column(self.spec.key).combine_chunks().unique()


P = ParamSpec("P")
R = TypeVar("R")


def _operation(
    method: Callable[Concatenate[PartitionState, P], R],
) -> Callable[Concatenate[PartitionState, P], R]:
    """Require an OPEN transaction; any exception fails it for good."""

    @functools.wraps(method)
    def wrapper(self: PartitionState, *args: P.args, **kwargs: P.kwargs) -> R:
        if self.state is not TxState.OPEN:
            raise StateError(
                f"state transaction of {self.job}/{self.partition} at version {self.version}"
                f" is {self.state.value}; it can no longer {method.__name__.rstrip('_')}"
            )
        try:
            return method(self, *args, **kwargs)
        except BaseException as e:
            self._fail()
            if isinstance(e, SessionizeError) or not isinstance(e, OSError | pa.ArrowException):
                raise
            raise StateError(
                f"state store failed during {method.__name__} of {self.job}/{self.partition}"
                f" at version {self.version}: {e}"
            ) from e

    return wrapper


class PartitionState:
    """A transaction on one (job, partition), reading the version it was opened at.

    Not thread-safe: one task uses it. Use as a context manager to abort on exceptions
    (and on leaving the block without a commit).
    """

    def __init__(self, stored: StoredVersion):
        self._stored = stored
        self._spec = stored.spec
        self._buffer = WriteBuffer(stored.spec)
        self._metrics = stored.metrics
        self.job = stored.job
        self.partition = stored.partition
        self.state = TxState.OPEN

    @property
    def version(self) -> int:
        """The version that was loaded (-1 for the empty state)."""
        return self._stored.version

    @property
    def meta(self) -> dict[str, Any]:
        """The dict committed with the loaded version ({} for -1)."""
        return self._stored.meta

    # ----- reads ---------------------------------------------------------------------

    @_operation
    def get_many(self, keys: Any) -> pa.Table:
        """All rows of `keys` as of the loaded version plus this transaction's writes.
        Rows of one key keep the order they were put in; keys come in no particular order."""
        keys = as_keys(keys)
        staged = self._buffer.staged_rows(keys)
        untouched = self._buffer.untouched(keys)
        parts = [staged]
        if len(untouched):
            t0 = perf_counter()
            stored = self._stored.read_rows(untouched)
            self._metrics.read_ms += (perf_counter() - t0) * 1000
            if not stored.schema.equals(self._spec.schema):
                stored = stored.select(self._spec.schema.names).cast(self._spec.schema)
            parts.append(stored)
        out = pa.concat_tables(parts) if len(parts) > 1 else staged
        self._metrics.rows_returned += out.num_rows
        return out

    @_operation
    def expiring(self, upto_us: int | dt.datetime) -> pa.Int64Array:
        """Sorted keys whose earliest expiry is strictly before `upto_us` (microseconds since
        the epoch, or an aware datetime), as of the loaded version plus this transaction's
        writes."""
        upto = _to_us(upto_us)
        t0 = perf_counter()
        stored = self._stored.read_expiring(upto)
        self._metrics.read_ms += (perf_counter() - t0) * 1000
        if isinstance(stored, pa.ChunkedArray):
            stored = stored.combine_chunks()
        stored = self._buffer.untouched(stored)
        both = pa.concat_arrays([stored.cast(pa.int64()), self._buffer.expiring(upto)]).unique()
        return both.take(pc.sort_indices(both))

    # ----- writes --------------------------------------------------------------------

    @_operation
    def put_many(self, rows: pa.Table) -> None:
        """Stage `rows` (the state schema); they replace ALL rows of each key present."""
        rows = self._spec.conform(rows)
        if rows.num_rows:
            self._buffer.put(rows)

    @_operation
    def remove_many(self, keys: Any) -> None:
        """Stage the removal of all rows of `keys`."""
        keys = as_keys(keys)
        if len(keys):
            self._buffer.remove(keys)

    @_operation
    def commit(self, version: int, meta: dict[str, Any] | None = None) -> None:
        """Publish the staged writes as `version` (> the loaded version), with `meta`
        (a JSON-able dict), atomically. Committing a version that already exists replaces
        it (a re-executed batch), and supersedes any later versions."""
        check_version(version)
        if version <= self.version:
            raise StateError(
                f"cannot commit version {version} of {self.job}/{self.partition}:"
                f" it must be greater than the loaded version {self.version}"
            )
        meta = dict(meta or {})
        try:
            json.dumps(meta, allow_nan=False)
        except (TypeError, ValueError) as e:
            raise StateError(f"state commit meta must be JSON-able: {e}") from e
        t0 = perf_counter()
        buf = self._buffer
        self._stored.write(version, buf.puts, buf.removed, meta)
        m = self._metrics
        m.commit_ms += (perf_counter() - t0) * 1000
        m.committed_version = version
        m.rows_put += buf.puts.num_rows
        m.keys_removed += len(buf.removed)
        self.state = TxState.COMMITTED
        self._release()

    def abort(self) -> None:
        """Discard the staged writes; nothing is written. A no-op once the transaction has
        ended (committed, aborted or failed), so it is safe in `except`/`finally` blocks:
        a committed version stays committed."""
        if self.state is TxState.OPEN:
            self.state = TxState.ABORTED
            self._release()

    def metrics(self) -> StateMetrics:
        """A copy of what this transaction did so far."""
        m = self._metrics
        return StateMetrics(**{**m.as_dict(), "extra": dict(m.extra)})

    # ----- plumbing ------------------------------------------------------------------

    def _fail(self) -> None:
        if self.state is TxState.OPEN:
            self.state = TxState.FAILED
            self._release()

    def _release(self) -> None:
        self._buffer = WriteBuffer(self._spec)
        self._stored.close()

    def __enter__(self) -> PartitionState:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.state is TxState.OPEN:
            self.abort()

    def __repr__(self) -> str:
        return (
            f"PartitionState({self.job!r}, partition={self.partition},"
            f" version={self.version}, {self.state.value})"
        )


def _to_us(t: int | dt.datetime) -> int:
    if isinstance(t, dt.datetime):
        if t.tzinfo is None:
            raise StateError("expiring() needs an aware datetime (UTC) or microseconds")
        delta = t - dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
        return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds
    if not isinstance(t, int) or isinstance(t, bool):
        raise StateError(f"expiring() needs microseconds since the epoch, not {t!r}")
    return t
