"""The PostgreSQL sink's tables: column types from the outputs' Arrow schemas, the DDL, and
the conversions of rows for binary COPY and back to Arrow.

In the schema named by the URI (default `sessionize`)::

    NAME (output columns..., batch_id bigint)    one table per output, what readers query
    _sessionize_staged_NAME (..., batch_id, part) rows the tasks of a running batch staged
    _sessionize_attempts (batch_id)              a batch whose attempt is open (staging.py's
                                                 marker, as a row)
    _sessionize_batches (batch_id, published_at, row_counts)  the published batches

Indexes: every output by `batch_id` (reprocessing deletes by it); `sessions` by
(user_id, start_time) and by start_time (a user's sessions; sessions of a day);
`page_views` by session_id and by (user_id, event_time); staged rows by (batch_id, part).
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Collection, Iterable, Sequence
from typing import Any

import psycopg
import pyarrow as pa
import pyarrow.compute as pc
from psycopg import sql
from psycopg.types.json import Jsonb

from sessionize.schema import TS
from sessionize.state.backends.postgres_pool import scalar

BATCHES = "_sessionize_batches"
REPLACED_AT = "_sessionize_replaced"  # (name, batch_id): the batch a replaced output is as of
ATTEMPTS = "_sessionize_attempts"

# Output -> extra indexes (besides batch_id), for the queries readers run most; those whose
# columns a table lacks are skipped (`anonymous_id` exists with --anonymous-field only).
INDEXES: dict[str, list[tuple[str, ...]]] = {
    "sessions": [("user_id", "start_time"), ("start_time",), ("anonymous_id", "start_time")],
    "page_views": [("session_id",), ("user_id", "event_time"), ("anonymous_id", "event_time")],
    "late_events": [("user_id", "event_time"), ("anonymous_id", "event_time")],
}


def staged_table(name: str) -> str:
    return f"_sessionize_staged_{name}"


def table_exists(conn: psycopg.Connection, schema: str, name: str) -> bool:
    """Whether the schema holds a relation `name` (creates nothing)."""
    found = conn.execute("SELECT to_regclass(%s) IS NOT NULL", (f'"{schema}"."{name}"',))
    return bool(scalar(found))


def pg_type(t: pa.DataType) -> str:
    """The PostgreSQL type a column of Arrow type `t` is stored as."""
    simple = {
        pa.int64(): "bigint",
        pa.int32(): "integer",
        pa.int16(): "smallint",
        pa.bool_(): "boolean",
        pa.float64(): "double precision",
        pa.float32(): "real",
        pa.string(): "text",
        pa.large_string(): "text",
        pa.date32(): "date",
    }
    if t in simple:
        return simple[t]
    if pa.types.is_timestamp(t):
        return "timestamptz" if t.tz else "timestamp"
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        inner = pg_type(t.value_type)
        if inner != "jsonb":
            return inner + "[]"
    return "jsonb"  # maps, structs, lists of those


def arrow_type(udt: str) -> pa.DataType:
    """The Arrow type a reader gets for a column of PostgreSQL type `udt` (pg_type's inverse,
    by `information_schema.columns.udt_name`); JSON comes back as its text."""
    if udt.startswith("_"):
        return pa.list_(arrow_type(udt[1:]))
    return {
        "int8": pa.int64(),
        "int4": pa.int32(),
        "int2": pa.int16(),
        "bool": pa.bool_(),
        "float8": pa.float64(),
        "float4": pa.float32(),
        "date": pa.date32(),
        "timestamptz": TS,
        "timestamp": pa.timestamp("us"),
    }.get(udt, pa.string())


def ddl(
    schema: str, outputs: dict[str, pa.Schema], staged_only: Collection[str] = ()
) -> list[sql.Composed]:
    """The statements that create the schema, the tables and their indexes (if missing);
    the outputs in `staged_only` get their staging table only (`--revise-within`'s
    revisions, folded into `sessions` and `page_views`)."""
    s = sql.Identifier(schema)
    out = [
        sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(s),
        sql.SQL(
            "CREATE TABLE IF NOT EXISTS {} (batch_id bigint PRIMARY KEY, published_at "
            "timestamptz NOT NULL DEFAULT now(), row_counts jsonb NOT NULL)"
        ).format(sql.Identifier(schema, BATCHES)),
        sql.SQL("CREATE TABLE IF NOT EXISTS {} (batch_id bigint PRIMARY KEY)").format(
            sql.Identifier(schema, ATTEMPTS)
        ),
    ]
    for name, arrow in outputs.items():
        cols = column_defs(arrow)
        batch = sql.SQL("batch_id bigint NOT NULL")
        final = sql.Identifier(schema, name)
        staged = sql.Identifier(schema, staged_table(name))
        out.append(
            sql.SQL("CREATE TABLE IF NOT EXISTS {} ({})").format(
                staged, sql.SQL(", ").join([*cols, batch, sql.SQL("part integer NOT NULL")])
            )
        )
        out.append(
            sql.SQL("CREATE INDEX IF NOT EXISTS {} ON {} (batch_id, part)").format(
                sql.Identifier(f"{staged_table(name)}_by_batch"), staged
            )
        )
        if name in staged_only:
            continue
        out.append(
            sql.SQL("CREATE TABLE IF NOT EXISTS {} ({})").format(
                final, sql.SQL(", ").join([*cols, batch])
            )
        )
        indexes = [("batch_id",), *INDEXES.get(name, [])]
        for columns in indexes:
            if not all(c in arrow.names or c == "batch_id" for c in columns):
                continue
            out.append(
                sql.SQL("CREATE INDEX IF NOT EXISTS {} ON {} ({})").format(
                    sql.Identifier(f"{name}_by_{'_'.join(columns)}"),
                    final,
                    sql.SQL(", ").join(map(sql.Identifier, columns)),
                )
            )
    return out


def column_defs(fields: Iterable[pa.Field]) -> list[sql.Composable]:
    """The PostgreSQL column definitions of Arrow `fields`: name, type, NOT NULL."""
    return [
        sql.SQL("{} {}{}").format(
            sql.Identifier(f.name),
            sql.SQL(pg_type(f.type)),
            sql.SQL("" if f.nullable else " NOT NULL"),
        )
        for f in fields
    ]


def replaced_ddl(schema: str, name: str, arrow: pa.Schema, key: pa.Schema) -> list[sql.Composed]:
    """The tables of an output replaced by key (`open_sessions`, sinks/replaced.py): the
    output (indexed by the key), its staged rows, the staged keys (`key`: their columns),
    and the batch it is as of."""

    def columns(fields: Iterable[pa.Field]) -> sql.Composable:
        return sql.SQL(", ").join(column_defs(fields))

    staging = sql.SQL("batch_id bigint NOT NULL, part integer NOT NULL")
    final = sql.Identifier(schema, name)
    staged = sql.Identifier(schema, staged_table(name))
    keys = sql.Identifier(schema, staged_table(f"{name}_keys"))
    return [
        sql.SQL("CREATE TABLE IF NOT EXISTS {} (name text PRIMARY KEY, batch_id bigint)").format(
            sql.Identifier(schema, REPLACED_AT)
        ),
        sql.SQL("CREATE TABLE IF NOT EXISTS {} ({})").format(final, columns(arrow)),
        sql.SQL("CREATE INDEX IF NOT EXISTS {} ON {} ({})").format(
            sql.Identifier(f"{name}_by_{'_'.join(key.names)}"),
            final,
            sql.SQL(", ").join(map(sql.Identifier, key.names)),
        ),
        sql.SQL("CREATE TABLE IF NOT EXISTS {} ({}, {})").format(staged, columns(arrow), staging),
        sql.SQL("CREATE TABLE IF NOT EXISTS {} ({}, {})").format(keys, columns(key), staging),
        sql.SQL("CREATE INDEX IF NOT EXISTS {} ON {} (batch_id, part)").format(
            sql.Identifier(f"{staged_table(name)}_by_batch"), staged
        ),
        sql.SQL("CREATE INDEX IF NOT EXISTS {} ON {} (batch_id, part)").format(
            sql.Identifier(f"{staged_table(name)}_keys_by_batch"), keys
        ),
    ]


# PostgreSQL's text and jsonb cannot hold U+0000: it is written as these four characters,
# as `invalid_events.raw` writes a byte that is not UTF-8 (docs/reference/outputs.md).
NUL, NUL_WRITTEN = "\x00", "\\x00"


def _texts(array: pa.Array) -> list[pa.Array]:
    """The string arrays inside `array` (itself, list values, map keys and items, fields)."""
    t = array.type
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return [array]
    if pa.types.is_map(t):
        return _texts(array.keys) + _texts(array.items)
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return _texts(array.flatten())
    if pa.types.is_struct(t):
        return [a for i in range(t.num_fields) for a in _texts(array.field(i))]
    return []


def _escaped(value: object) -> object:
    if isinstance(value, str):
        return value.replace(NUL, NUL_WRITTEN)
    if isinstance(value, list):
        return [_escaped(v) for v in value]
    if isinstance(value, tuple):
        return tuple(_escaped(v) for v in value)
    if isinstance(value, dict):
        return {_escaped(k): _escaped(v) for k, v in value.items()}
    return value


def without_nul(column: pa.ChunkedArray) -> pa.ChunkedArray:
    """`column` with every U+0000 of its strings (at any depth) written as `\\x00`; as it
    is when it holds none (the usual case: looked for in Arrow, no Python per value)."""
    array = column.combine_chunks() if column.num_chunks != 1 else column.chunk(0)
    texts = _texts(array)
    if not any(pc.any(pc.match_substring(a, NUL)).as_py() for a in texts if len(a)):
        return column
    if pa.types.is_string(array.type) or pa.types.is_large_string(array.type):
        return pa.chunked_array([pc.replace_substring(array, NUL, NUL_WRITTEN)])
    return pa.chunked_array([pa.array(_escaped(array.to_pylist()), array.type)])


def copy_rows(table: pa.Table) -> tuple[list[str], list[tuple]]:
    """(the PostgreSQL types of `table`'s columns, its rows as tuples) for a binary COPY;
    JSON columns are wrapped for psycopg's jsonb dumper; U+0000 is written as `\\x00`."""
    types, columns = [], []
    for field, column in zip(table.schema, table.columns, strict=True):
        kind = pg_type(field.type)
        values = _python_values(without_nul(column))
        if kind == "jsonb":
            values = [None if v is None else Jsonb(_plain_json(v)) for v in values]
        types.append(kind)
        columns.append(values)
    return types, list(zip(*columns, strict=True))


def _python_values(column: pa.ChunkedArray) -> list:
    """The column's values as Python objects. Timestamps and dates go through numpy:
    `to_pylist` builds each time-zone-aware datetime through zoneinfo, 20x slower."""
    t = column.type
    if not (pa.types.is_timestamp(t) or pa.types.is_date32(t)):
        return column.to_pylist()
    plain = column.cast(pa.timestamp(t.unit)) if pa.types.is_timestamp(t) else column
    values = plain.to_numpy(zero_copy_only=False).astype(object).tolist()
    valid = column.is_valid().to_numpy(zero_copy_only=False)
    if pa.types.is_timestamp(t) and t.tz:
        return [
            v.replace(tzinfo=dt.UTC) if ok else None for v, ok in zip(values, valid, strict=True)
        ]
    return [v if ok else None for v, ok in zip(values, valid, strict=True)]


def _plain_json(value: object) -> object:
    """A map (Arrow gives a list of (key, value) pairs) as a JSON object."""
    if isinstance(value, list) and value and all(isinstance(v, tuple) for v in value):
        return {str(k): _plain_json(v) for k, v in value}
    if isinstance(value, list):
        return [_plain_json(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain_json(v) for k, v in value.items()}
    return value


def to_arrow(columns: list[tuple[str, str]], rows: list[tuple[Any, ...]]) -> pa.Table:
    """Rows fetched from an output table, with its (name, udt_name) columns, as Arrow."""
    schema = pa.schema([pa.field(n, arrow_type(u)) for n, u in columns])
    data: list[Sequence[Any]] = list(zip(*rows, strict=True)) if rows else [[] for _ in columns]
    arrays = []
    for field, values in zip(schema, data, strict=True):
        if pa.types.is_string(field.type):
            values = [v if v is None or isinstance(v, str) else json.dumps(v) for v in values]
        arrays.append(pa.array(list(values), field.type))
    return pa.Table.from_arrays(arrays, schema=schema)
