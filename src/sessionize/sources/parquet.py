"""Parquet files of a Hive-style tree -> the mapped fields of their rows, typed.

Listed like the JSON tree (`sources.files`: Spark's `binaryFile` listing, content unread)
and read in Python tasks with pyarrow, so a file Spark could not read never fails a task.
Each file yields the fields of the mapping (`mapping.EventMapping`) as flat columns named by
their paths, in one fixed schema, for `columns.parse_columns`; the per-row rules (a NULL,
a time out of range) are that module's.

A file whose schema lacks a required field (user, time, page) or holds a mapped field in a
type that cannot be it (a string user with `--user-type long`, a number for the page) does
not stop the run: each of its rows goes to `invalid_events` with the row as JSON and the
reason naming the field and the file's type (`ts: expected an integer, the Parquet file has
string`), its `source` naming the file. Stopping would not help: the file is already in
the checkpoint's offset log, so the stream would stop again on every restart, and the
other files of the batch would wait behind it. A file that is not Parquet, or cannot be
read to its end, gives one row `unreadable file: ...`, as a JSON file does.
"""

from __future__ import annotations

import contextlib
import functools
import json
from collections.abc import Iterator, Mapping

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.pandas.types import from_arrow_schema

from sessionize.errors import ConfigError
from sessionize.mapping import EventMapping
from sessionize.sources.files import OPTIONS, binary_listing, listed_batch
from sessionize.sources.lines import open_path

SIDE = ("error", "source", "raw")
_BATCH_ROWS = 64 * 1024


def _fields(mapping: EventMapping) -> dict[str, tuple[str, bool]]:
    """path -> (kind, required): what each mapped field must be in a file. A number (an
    epoch time, a gap, a conversion's value) is given as its text, so that a file of
    numbers and one of numeric strings give one schema (`columns` reads both alike)."""
    m = mapping
    user = "integer" if m.user_type == "long" else "string"
    time = "time" if m.time_format == "iso8601" else "number"
    out = {m.key_field: (user, True), m.time: (time, True), m.page: ("string", True)}
    strings = (m.action, *(p for _, p in (*m.keep, *m.read_last, *m.mapped_pairs)), m.change)
    for path in filter(None, strings):
        out.setdefault(path, ("string", False))
    for path in filter(None, (m.gap, *(c.value for c in m.content.conversions))):
        out.setdefault(path, ("number", False))
    clash = sorted(set(out) & set(SIDE))
    if clash:
        raise ConfigError(f"a mapped field cannot be named {clash[0]} in Parquet input")
    return out


def output_schema(mapping: EventMapping) -> pa.Schema:
    """The fixed schema every file's rows are given in: one column per mapped path."""
    arrow = {
        "integer": pa.int64(),
        "string": pa.string(),
        "time": pa.string(),
        "number": pa.string(),
    }
    fields = [pa.field(path, arrow[kind]) for path, (kind, _) in _fields(mapping).items()]
    return pa.schema([*fields, *(pa.field(name, pa.string()) for name in SIDE)])


def _find(batch: pa.RecordBatch, path: str) -> pa.Array | None:
    """The array at a dotted path (a top-level name with dots wins), as columns.resolve."""
    parts = path.split(".")
    for i in range(len(parts), 0, -1):
        name = ".".join(parts[:i])
        if name not in batch.schema.names:
            continue
        array = batch.column(name)
        for part in parts[i:]:
            if not pa.types.is_struct(array.type) or array.type.get_field_index(part) < 0:
                return None
            array = pc.struct_field(array, part)
        return array
    return None


_EXPECTED = {
    "integer": "an integer",
    "string": "a string",
    "time": "a timestamp or a string",
    "number": "a number or a string",
}


def _convert(array: pa.Array, kind: str) -> pa.Array:
    """`array` in the output type of `kind`; ArrowInvalid/TypeError when it cannot be."""
    t = array.type
    if pa.types.is_dictionary(t):
        array, t = array.dictionary_decode(), t.value_type
    if kind == "integer" and pa.types.is_integer(t):
        return array.cast(pa.int64())  # safe: a uint64 beyond int64 raises
    text = pa.types.is_string(t) or pa.types.is_large_string(t)
    if text and kind in ("string", "time", "number"):
        return array.cast(pa.string())
    if kind == "number" and (
        pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_decimal(t)
    ):
        return array.cast(pa.string())
    if kind == "time" and pa.types.is_timestamp(t):
        # A timestamp without a time zone is UTC, as an ISO-8601 time without an offset.
        utc = array.cast(pa.timestamp("us")).cast(pa.timestamp("us", tz="UTC"))
        return pc.strftime(utc, format="%Y-%m-%dT%H:%M:%SZ")
    raise TypeError(f"expected {_EXPECTED[kind]}, the Parquet file has {t}")


def _printable(t: pa.DataType) -> pa.DataType:
    """`t` with its times as strings: Python's datetime holds only the years 1-9999, and a
    Parquet file's timestamps may lie anywhere (Arrow prints them all)."""
    if pa.types.is_timestamp(t) or pa.types.is_date(t) or pa.types.is_time(t):
        return pa.string()
    if pa.types.is_struct(t):
        return pa.struct([f.with_type(_printable(f.type)) for f in t])
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return pa.list_(t.value_field.with_type(_printable(t.value_type)))
    return t


def _rows_json(batch: pa.RecordBatch) -> pa.Array:
    # Kept as it is where the cast fails: `default=str` below, or the file's unreadable row.
    with contextlib.suppress(pa.ArrowInvalid, pa.ArrowNotImplementedError):
        batch = batch.cast(pa.schema([f.with_type(_printable(f.type)) for f in batch.schema]))
    return pa.array([json.dumps(r, default=str) for r in batch.to_pylist()], pa.string())


def convert_batch(
    batch: pa.RecordBatch, fields: Mapping[str, tuple[str, bool]], schema: pa.Schema, path: str
) -> pa.RecordBatch:
    """One batch of a file -> `schema`; when a field is missing or mistyped, every row
    carries the reason (the first failing field, in mapping order) and its row as JSON."""
    n = batch.num_rows
    columns: dict[str, pa.Array] = {}
    reason = None
    for name, (kind, required) in fields.items():
        found = _find(batch, name)
        if found is None:
            if required and reason is None:
                reason = f"{name}: not in the Parquet file"
            columns[name] = pa.nulls(n, schema.field(name).type)
            continue
        try:
            columns[name] = _convert(found, kind)
        except (TypeError, pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
            text = str(exc) if isinstance(exc, TypeError) else "integer out of range (64-bit)"
            reason = reason or f"{name}: {text}"
            columns[name] = pa.nulls(n, schema.field(name).type)
    columns["error"] = pa.array([reason] * n, pa.string())
    columns["source"] = pa.array([path] * n, pa.string())
    columns["raw"] = _rows_json(batch) if reason else pa.nulls(n, pa.string())
    return pa.RecordBatch.from_pydict(columns, schema=schema)


def read_file(path: str, mapping: EventMapping) -> Iterator[pa.RecordBatch]:
    """The rows of one Parquet file in `output_schema(mapping)`; never raises for the
    file's sake (see the module doc)."""
    fields, schema = _fields(mapping), output_schema(mapping)
    rows = 0
    try:
        fs, p = open_path(path)
        with fs.open_input_file(p) as f:
            for batch in pq.ParquetFile(f).iter_batches(batch_size=_BATCH_ROWS):
                rows += batch.num_rows
                yield convert_batch(batch, fields, schema, path)
    except (OSError, pa.ArrowException) as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        error = f"unreadable file: {first} after {rows} rows"
        one: dict[str, list[str | None]] = {name: [None] for name in schema.names}
        one.update(error=[error], source=[path])
        yield pa.RecordBatch.from_pydict(one, schema=schema)


def _read_task(mapping: EventMapping, batches: Iterator[pa.RecordBatch]):
    for batch in batches:
        for path in batch.column("path").to_pylist():
            yield from read_file(path, mapping)


def _rows(df: DataFrame, mapping: EventMapping) -> DataFrame:
    task = functools.partial(_read_task, mapping)
    return df.select("path").mapInArrow(task, from_arrow_schema(output_schema(mapping)))


def parquet_stream(
    spark: SparkSession, path: str, options: Mapping[str, str], mapping: EventMapping
) -> DataFrame:
    """The tree's Parquet rows as a stream; `maxFilesPerTrigger` caps files per batch."""
    unknown = sorted(set(options) - set(OPTIONS))
    if unknown:
        raise ConfigError(f"file input options {unknown} unknown; accepted: {', '.join(OPTIONS)}")
    _fields(mapping)
    return _rows(binary_listing(spark, path, options), mapping)


def parquet_batch(spark: SparkSession, paths: list[str], mapping: EventMapping) -> DataFrame:
    """The same rows from a fixed list of files or directories (batch mode)."""
    return _rows(listed_batch(spark, paths), mapping)
