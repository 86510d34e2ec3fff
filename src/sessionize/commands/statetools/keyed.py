"""`sessionize state inspect` and `export` of a processor's job (`stateful.stream/run`):
its state rows per key, as the processor declared them plus the key's timer."""

from __future__ import annotations

import os

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from sessionize.commands.statetools.contents import PartitionContents, StoredRows
from sessionize.core.declared import NEVER_US
from sessionize.errors import ConfigError
from sessionize.fs import resolve_fs


def shown(rows: pa.Table, shape: StoredRows) -> pa.Table:
    """The rows as the processor sees them: its state columns and the key's timer (a key
    without one: null), ordered by key; the store's hash of a string key is left out."""
    timer = shape.spec.expiry
    names = [n for n in rows.column_names if n != shape.spec.key or n == shape.key]
    rows = rows.select(names)
    at = rows[timer].cast(pa.int64())
    none = pc.greater_equal(at, NEVER_US)
    timers = pc.if_else(none, pa.scalar(None, pa.int64()), at).cast(rows.schema.field(timer).type)
    rows = rows.set_column(rows.schema.get_field_index(timer), timer, timers)
    return rows.sort_by([(shape.key, "ascending")])


def next_timer_us(rows: pa.Table, shape: StoredRows) -> int | None:
    """The earliest timer set in `rows` (None: none is)."""
    at = rows[shape.spec.expiry].cast(pa.int64())
    return pc.min(at.filter(pc.less(at, NEVER_US))).as_py()


def key_rows(parts: list[PartitionContents], shape: StoredRows, key: str) -> pa.Table:
    """The state rows of one key (`key` as the input spells it)."""
    want = shape.stored.field(shape.key).type
    try:
        value = pa.scalar(key).cast(want)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        raise ConfigError(f"--key '{key}': this job's keys are {want} values") from None
    rows = pa.concat_tables([p.rows.filter(pc.equal(p.rows[shape.key], value)) for p in parts])
    return shown(rows, shape)


def write_rows(parts: list[PartitionContents], shape: StoredRows, to: str) -> int:
    """Every key's state rows (`shown`) as one Parquet file `to`; returns the row count."""
    rows = [p.rows for p in parts]
    table = shown(pa.concat_tables(rows) if rows else shape.stored.empty_table(), shape)
    fs, path = resolve_fs(to)
    parent = os.path.dirname(path)
    if parent:
        fs.create_dir(parent, recursive=True)
    pq.write_table(table, path, filesystem=fs)
    return table.num_rows
