"""Output rows -> Kafka records: JSON values keyed by the job's key column (`user_id`).

Timestamps become ISO-8601 strings in UTC with microseconds (`2026-11-01T23:58:00.000000Z`),
dates `YYYY-MM-DD`, lists JSON arrays, maps JSON objects (keys as strings). Every value carries
the row's `batch_id`; at-least-once delivery adds `position`, the row's index in its output's
part of the batch, so that (`batch_id`, `position`) names a row across repeated deliveries.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from sessionize.errors import EnvironmentProblem

KEY = "user_id"
ISO = "%Y-%m-%dT%H:%M:%SZ"  # of a timestamp[us]: %S gives seconds with 6 decimals


def _converter(t: pa.DataType):
    """A function turning one Python value of Arrow type `t` into its JSON value."""
    if pa.types.is_timestamp(t):
        return lambda v: None if v is None else _iso(v)
    if pa.types.is_date(t):
        return lambda v: None if v is None else v.isoformat()
    if pa.types.is_map(t):
        key, item = _converter(t.key_type), _converter(t.item_type)
        return lambda v: None if v is None else {str(key(k)): item(x) for k, x in v}
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_list_view(t):
        inner = _converter(t.value_type)
        return lambda v: None if v is None else [inner(x) for x in v]
    if pa.types.is_struct(t):
        fields = {f.name: _converter(f.type) for f in t}
        return lambda v: None if v is None else {k: fields[k](x) for k, x in v.items()}
    if pa.types.is_decimal(t):
        return lambda v: None if v is None else str(v)
    return lambda v: v


def _needs_conversion(t: pa.DataType) -> bool:
    """Whether Python's values of type `t` are not JSON as they are."""
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_list_view(t):
        return _needs_conversion(t.value_type)
    return (
        pa.types.is_timestamp(t)
        or pa.types.is_date(t)
        or pa.types.is_map(t)
        or pa.types.is_struct(t)
        or pa.types.is_decimal(t)
    )


def _json_column(column: pa.ChunkedArray) -> list:
    """One column's JSON values, converted by Arrow where it can (whole columns at once)."""
    t = column.type
    if pa.types.is_timestamp(t):
        utc = column.cast(pa.timestamp("us", "UTC"))  # strftime writes the zone's wall time
        return pc.strftime(utc, format=ISO).to_pylist()
    if pa.types.is_date(t):
        return column.cast(pa.string()).to_pylist()
    if not _needs_conversion(t):
        return column.to_pylist()
    convert = _converter(t)
    return [convert(v) for v in column.to_pylist()]


def _iso(value: dt.datetime) -> str:
    if value.tzinfo is not None:
        value = value.astimezone(dt.UTC).replace(tzinfo=None)
    return value.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def encode(
    table: pa.Table, *, positions: bool = False, key: str | None = KEY
) -> Iterator[tuple[bytes | None, bytes]]:
    """(key, value) of each row of `table` (which holds `batch_id`), in row order.

    Args:
        table: One output's rows of one batch, with its `batch_id` column.
        positions: Add `position` (the row's index in `table`) to each value.
        key: The column that keys the records (the job's key: `user_id` for sessions).

    Returns:
        An iterator of (key, value): the key is the `key` column as text (None when the
        output has no such column, as `invalid_events`), the value a JSON object.

    Example:
        >>> t = pa.table({"user_id": [7], "batch_id": [3]})
        >>> next(encode(t, positions=True))
        (b'7', b'{"user_id":7,"batch_id":3,"position":0}')
    """
    try:
        import orjson
    except ImportError as e:  # pragma: no cover - depends on the installation
        raise EnvironmentProblem(
            "writing Kafka needs orjson: pip install 'sessionize[kafka]'"
        ) from e
    names = table.schema.names
    columns = [_json_column(table[name]) for name in names]
    keys = table[key].to_pylist() if key in names else [None] * table.num_rows
    for position, (key, row) in enumerate(zip(keys, zip(*columns, strict=True), strict=True)):
        value: dict[str, Any] = dict(zip(names, row, strict=True))
        if positions:
            value["position"] = position
        yield (None if key is None else str(key).encode()), orjson.dumps(value)


def per_key_records(
    keys: pa.Table,
    rows: pa.Table,
    batch_id: int,
    name: str = "open_sessions",
    key: tuple[str, ...] = (KEY,),
) -> list[tuple[bytes, bytes | None]]:
    """An output `name` replaced by `key` as one record per touched key: the key's rows as
    a JSON list, `{"user_id": K, "batch_id": B, "open_sessions": [...]}`, or a tombstone
    (value None) when it has none left, so that a log-compacted topic keeps each key's
    latest record only. A key of several columns is keyed by their values as a JSON list.

    Example:
        >>> keys = pa.table({"user_id": [1, 2]})
        >>> rows = pa.table({"user_id": [1], "updated_batch": [5]})
        >>> per_key_records(keys, rows, 5)[1]
        (b'2', None)
    """
    import orjson

    def key_of(values: tuple) -> bytes:
        return str(values[0]).encode() if len(values) == 1 else orjson.dumps(list(values))

    by_key: dict[bytes, list[bytes]] = {}
    key_columns = [rows[c].to_pylist() for c in key]
    for values, (_, value) in zip(
        zip(*key_columns, strict=True), encode(rows, key=None), strict=True
    ):
        by_key.setdefault(key_of(values), []).append(value)
    out: list[tuple[bytes, bytes | None]] = []
    touched = [keys[c].to_pylist() for c in key]
    for values in zip(*touched, strict=True):
        record_key = key_of(values)
        found = by_key.get(record_key)
        if found is None:
            out.append((record_key, None))
            continue
        head = orjson.dumps({**dict(zip(key, values, strict=True)), "batch_id": batch_id})[:-1]
        out.append((record_key, head + f',"{name}":['.encode() + b",".join(found) + b"]}"))
    return out
