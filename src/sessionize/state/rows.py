"""What the store keeps and how it is addressed: the row spec, keys, and the checks on job
names, partitions and versions that every backend shares."""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from sessionize.errors import ConfigError, StateError
from sessionize.schema import STATE, STATE_EXPIRY, STATE_KEY, Layout

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


def layout_rows(shape: Layout) -> RowSpec:
    """The store's rows of an event layout: its stored schema, keyed by its state key (the
    user id, or with string ids the `user_key` hash)."""
    return RowSpec(shape.stored, key=shape.state_key)


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


def no_keys() -> pa.Int64Array:
    return pa.array([], pa.int64())


def check_job(job: str) -> str:
    if not isinstance(job, str) or not _JOB_NAME.match(job):
        raise ConfigError(
            f"job name {job!r} must be 1-200 characters of letters, digits, '.', '_', '=', '-'"
            " and start with a letter or digit"
        )
    return job


def check_partition(partition: int) -> int:
    if not _is_int(partition) or partition < 0:
        raise ConfigError(f"partition must be a non-negative integer, not {partition!r}")
    return partition


def check_version(version: int, *, allow_empty: bool = False) -> int:
    low = EMPTY_VERSION if allow_empty else 0
    if not _is_int(version) or version < low:
        raise StateError(f"version must be an integer >= {low}, not {version!r}")
    return version


def check_retain(retain: int) -> int:
    if not _is_int(retain) or retain < 1:
        raise ConfigError(f"retain must be a positive number of versions, not {retain!r}")
    return retain


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
