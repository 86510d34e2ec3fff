"""How every partition task learns the batch's size and latest event time in the one job.

The watermark after a batch depends on the latest valid event time of the whole batch,
and every partition task needs it before it closes sessions. Rather than a Spark job of
its own before the partition job (plus a cache of the parsed rows between the two), each
task of the shuffle's map side passes its rows through and then sends one mark row to
every state partition: its number of lines and its latest valid event time. A mark row
carries a `user_id` that Spark's hash partitioning places in that partition, so every
partition task receives the marks of all the map tasks, adds them up, and so derives the
same figures as the driver, which reads them back from the tasks' counters.

A rerun of a map task reads the same input and sends the same marks; a map task with no
rows sends none (it has nothing to add).

The JSON lines parser sends the marks from the task that reads the lines (`parsing.parse`
with `marks`); `with_marks` sends them in a pass of its own for the rows of any other
parser (typed rows) and for the keyed engine's records.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame
from pyspark.sql import types as T

from sessionize.core.partitioner import spark_partitions
from sessionize.events.marks import LATEST, RECORDS, pass_and_mark
from sessionize.events.packing import PACKED, pack, unpack

# Candidates tried per partition when looking for a key that lands in each one: with
# 64 per partition, the chance that one partition gets none is about e^-64.
_CANDIDATES_PER_PARTITION = 64


def mark_keys(partitions: int, user_type: pa.DataType) -> pa.Array:
    """One `user_id` per partition (in partition order) that `partition_users` places in
    that partition: computed as Spark's shuffle places keys (`stateful.partitioner`, held
    to Spark's own placement by tests/stateful/test_partitioner.py), with no Spark job."""
    n = partitions * _CANDIDATES_PER_PARTITION
    candidates = pa.array(np.arange(n, dtype=np.int64))
    if pa.types.is_string(user_type):
        candidates = pc.cast(candidates, pa.string())
    placed = spark_partitions(candidates, partitions)
    found, first = np.unique(placed, return_index=True)  # partitions in order, first key of each
    if len(found) < partitions:
        raise RuntimeError(f"no mark key found for every one of {partitions} partitions")
    return candidates.take(pa.array(first))


def with_marks(
    parsed: DataFrame, keys: pa.Array, key: str = "user_id", time: str | None = "event_time"
) -> DataFrame:
    """`parsed` with the two mark columns, plus one mark row per (map task, partition);
    the rows themselves travel packed by partition (`events.packing`) where Spark's
    placement of `key`'s type is computed in Arrow (64-bit integers, strings).

    `key` is the column the shuffle places rows by, `time` the event time (None: none);
    rows with a `reason` (invalid lines) have no valid event time."""
    fields = [T.StructField(f.name, f.dataType, True) for f in parsed.schema.fields]
    schema = T.StructType(
        [
            *fields,
            T.StructField(RECORDS, T.LongType()),
            T.StructField(LATEST, T.LongType()),
            T.StructField(PACKED, T.BinaryType()),
        ]
    )
    task = functools.partial(_mark_and_pack, keys=keys, key=key, time=time, columns=parsed.columns)
    return parsed.mapInArrow(task, schema)


def _mark_and_pack(
    batches: Iterator[pa.RecordBatch],
    keys: pa.Array,
    key: str,
    time: str | None,
    columns: list[str],
) -> Iterator[pa.RecordBatch]:
    marked = pass_and_mark(batches, keys, key, time, _valid)
    yield from pack(marked, keys, key, _not_a_mark, columns)


def _not_a_mark(batch: pa.RecordBatch) -> pa.Array:
    return pc.is_null(batch.column(RECORDS))


def _valid(batch: pa.RecordBatch) -> pa.Array | None:
    """Rows with a `reason` (invalid lines) have no valid event time."""
    return pc.is_null(batch.column("reason")) if "reason" in batch.schema.names else None


def parse_marked(
    parser: Callable[..., DataFrame], raw: DataFrame, keys: pa.Array, **options
) -> DataFrame:
    """`parser(raw, **options, marks=keys)` with the batch marks of `keys`: made by the task
    that reads the lines where the parser can (`parsing.parse`), else, when the parser
    returns no mark columns (`columns.parse_columns`), in a pass of their own
    (`with_marks`)."""
    parsed = parser(raw, **options, marks=keys)
    return parsed if RECORDS in parsed.columns else with_marks(parsed, keys)


def split_marks(rows: pa.Table | None) -> tuple[pa.Table | None, int, int | None]:
    """A partition task's input -> (the batch's rows without the mark columns, those that
    travelled packed unpacked (`packing.unpack`), the lines of the whole batch, the latest
    valid event time of the whole batch)."""
    if rows is None:
        return None, 0, None
    is_mark = pc.is_valid(rows[RECORDS])
    marks = rows.filter(is_mark)
    events = unpack(rows.filter(pc.invert(is_mark)).drop_columns([RECORDS, LATEST]))
    records = pc.sum(marks[RECORDS]).as_py() or 0
    return events, records, pc.max(marks[LATEST]).as_py()
