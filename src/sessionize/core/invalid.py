"""Input rows that cannot be processed: the rows a source could not type (`stateful.source`
marks them with a reason) and rows without a key or event time. They never reach
`process`; the engine writes them to the output `invalid`, once, with their reason.

An input marks a row invalid by a non-null `_reason`, with the record as it arrived in
`_raw` and where it came from in `_source` (the three columns `stateful.source` adds); any
other input may lack them. A row with a null key or event time is invalid too
(`missing COLUMN`), whatever its input: its `raw` is then the row as a JSON object.
"""

from __future__ import annotations

import datetime as dt
import json

import pyarrow as pa
import pyarrow.compute as pc

RAW = "_raw"
REASON = "_reason"
SOURCE = "_source"
MARKS = (RAW, REASON, SOURCE)
"""The columns by which an input marks its invalid rows (null on valid rows)."""
INVALID_OUTPUT = "invalid"
INVALID_SCHEMA = pa.schema(
    [
        pa.field("raw", pa.string()),
        pa.field("reason", pa.string(), nullable=False),
        pa.field("source", pa.string()),  # file path, or topic/partition/offset
    ]
)


def without_marks(schema: pa.Schema) -> pa.Schema:
    """The columns `process` sees: the input's without the invalid marks."""
    return pa.schema([f for f in schema if f.name not in MARKS])


def split_invalid(rows: pa.Table, key: str, event_time: str | None) -> tuple[pa.Table, pa.Table]:
    """(the valid rows without the marks, the invalid ones as INVALID_SCHEMA rows).

    A row is invalid when it carries a `_reason`, or else when its key or event time is
    null (`missing KEY`, then `missing EVENT_TIME`). The invalid rows are sorted by
    (source, raw, reason), so that what a batch writes never depends on arrival order.

    Example:
        >>> rows = pa.table({"k": [1, None], "t": pa.array([5, 6], pa.timestamp("us"))})
        >>> valid, invalid = split_invalid(rows, "k", "t")
        >>> valid.num_rows, invalid.column("reason").to_pylist()
        (1, ['missing k'])
    """
    n = rows.num_rows
    reason = rows.column(REASON) if REASON in rows.column_names else pa.nulls(n, pa.string())
    for column in [key] + ([event_time] if event_time else []):
        missing = pc.is_null(rows.column(column))
        reason = pc.coalesce(reason, pc.if_else(missing, f"missing {column}", None))
    bad = pc.is_valid(reason)
    marks = [name for name in MARKS if name in rows.column_names]
    valid = rows.filter(pc.invert(bad)).drop_columns(marks)
    if not pc.any(bad).as_py():
        return valid, INVALID_SCHEMA.empty_table()
    bad_rows = rows.filter(bad)
    raw = bad_rows.column(RAW) if RAW in marks else pa.nulls(bad_rows.num_rows, pa.string())
    as_json = pa.array(
        [json.dumps(row, default=_shown) for row in bad_rows.drop_columns(marks).to_pylist()],
        pa.string(),
    )
    # A row a source could not read keeps its `_raw` (null when nothing was read); a row
    # that only lacks its key or time shows its columns.
    if REASON in marks:
        from_source = pc.is_valid(bad_rows.column(REASON))
    else:
        from_source = pa.array([False] * bad_rows.num_rows)
    no_raw = pc.and_(pc.is_null(raw), pc.invert(from_source))
    source = (
        bad_rows.column(SOURCE) if SOURCE in marks else pa.nulls(bad_rows.num_rows, pa.string())
    )
    invalid = pa.table(
        {
            "raw": pc.if_else(no_raw, as_json, raw).cast(pa.string()),
            "reason": reason.filter(bad).cast(pa.string()),
            "source": source.cast(pa.string()),
        }
    )
    order = [("source", "ascending"), ("raw", "ascending"), ("reason", "ascending")]
    invalid = invalid.take(pc.sort_indices(invalid, order))
    return valid, invalid.cast(INVALID_SCHEMA)


def _shown(value: object) -> str:
    """A value JSON has no type for: a time in ISO-8601, anything else as `str` shows it."""
    if isinstance(value, dt.datetime | dt.date | dt.time):
        return value.isoformat()
    return str(value)
