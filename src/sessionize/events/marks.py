"""The batch marks' columns and rows, in Arrow (how they travel: engines/batch_marks.py).

A map task sends one mark row to every state partition: its number of lines (`RECORDS`)
and its latest valid event time (`LATEST`). The rows of the batch carry NULL in both; a
mark row carries NULL in every other column but the key that places it. The block reader
(`parsing.parse`) makes them in the task that reads the lines, `batch_marks.with_marks` in
a pass of its own for any other parser.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pyarrow as pa
import pyarrow.compute as pc

RECORDS = "_mark_records"  # lines read by one map task (NULL on the rows of the batch)
LATEST = "_mark_latest"  # its latest valid event time, µs (NULL: none)
FIELDS = (pa.field(RECORDS, pa.int64()), pa.field(LATEST, pa.int64()))


def marked_schema(schema: pa.Schema) -> pa.Schema:
    """`schema`, every field nullable (a mark row is NULL but for its key), plus the two
    mark columns."""
    return pa.schema([*(f.with_nullable(True) for f in schema), *FIELDS])


def pass_and_mark(
    batches: Iterator[pa.RecordBatch],
    keys: pa.Array,
    key: str,
    time: str | None,
    valid: Callable[[pa.RecordBatch], pa.Array | None],
) -> Iterator[pa.RecordBatch]:
    """A map task's rows in `marked_schema`, then its mark rows, one per key of `keys`
    (held in column `key`): its number of rows and the latest `time` of the rows where
    `valid(batch)` is true (None: every row). No rows in: no mark rows out."""
    records, latest, schema = 0, None, None
    for b in batches:
        if schema is None:
            schema = marked_schema(b.schema)
        records += b.num_rows
        if time is not None and b.num_rows:
            latest = _later(latest, _latest_time(b.column(time), valid(b)))
        none = pa.nulls(b.num_rows, pa.int64())
        yield pa.RecordBatch.from_arrays([*b.columns, none, none], schema=schema)
    if schema is not None:
        yield _mark_rows(schema, keys, key, records, latest)


def _mark_rows(
    schema: pa.Schema, keys: pa.Array, key: str, records: int, latest: int | None
) -> pa.RecordBatch:
    """One mark row per key of `keys`, in `schema` (a `marked_schema`): `key` holds it."""
    n = len(keys)
    columns = [
        keys.cast(f.type) if f.name == key else pa.nulls(n, f.type) for f in list(schema)[:-2]
    ]
    columns += [pa.array([records] * n, pa.int64()), pa.array([latest] * n, pa.int64())]
    return pa.RecordBatch.from_arrays(columns, schema=schema)


def _latest_time(times: pa.Array, valid: pa.Array | None) -> int | None:
    """The latest of `times` (timestamps) where `valid` is true, µs since the epoch (None:
    none)."""
    if valid is not None:
        times = pc.filter(times, valid)
    if len(times) == 0:
        return None
    unit = pa.timestamp("us", tz=times.type.tz)
    return pc.max(pc.cast(times, unit, safe=False).cast(pa.int64())).as_py()


def _later(a: int | None, b: int | None) -> int | None:
    return b if a is None else a if b is None else max(a, b)
