"""A processor's follow-on (`stateful.FollowOn`): the second keyed step of a batch.

The first step's partition tasks write the rows of the output the follow-on takes to the
batch's *hand-off*, one Parquet file per partition under `PLACE/batch=V/` (a folder of the
checkpoint, through its file system, so S3 works), instead of staging them for the sink.
Once the first step's Spark job has ended, a second job runs the follow-on, with DataFrames
only (so Spark Connect runs it too):

  1. a frame of the partition numbers; each task reads its partitions' hand-off files and
     packs their rows by the partition the follow-on's key is placed in (Spark's hash, as
     `core/partitioner.py` computes it), one Arrow IPC stream per target partition, in a
     row keyed by that partition's mark key (engines/batch_marks.py);
  2. shuffled by that key, so each stream reaches its partition (`repartition(N, key)`,
     as every keyed input is placed);
  3. each partition task unpacks its rows and runs the same partition step as the first
     job (engines/partition.py) with the follow-on's settings: its own store job, the
     first step's watermarks, committing the same version.

The hand-off of batch V is cleared before the batch runs and removed once its record is
written; a rerun of V writes the same files again from the same state (version V-1 of both
jobs), so it never reads another attempt's rows.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql import DataFrame
from pyspark.sql import types as T

from sessionize.core.declared import declared
from sessionize.core.partitioner import spark_partitions
from sessionize.engines.batch_marks import mark_keys
from sessionize.engines.partition import (
    BatchPlan,
    check_placement,
    collect_partitions,
    counts_batch,
    handoff_place,
    missing_task,
    run_partition,
)
from sessionize.fs import delete_dir, resolve_fs
from sessionize.spark_arrow import frame_of

if TYPE_CHECKING:
    # The follow-on's settings; keyed.py runs the follow-on (no import at run time).
    from sessionize.engines.keyed import KeyedSettings

_ROWS = "_rows"  # an Arrow IPC stream of one target partition's rows


def clear(place: str) -> None:
    """Drop every batch's hand-off (before a batch runs: an earlier attempt's; after its
    record: its own)."""
    if place:
        fs, path = resolve_fs(place)
        delete_dir(fs, path)


@dataclass(frozen=True)
class _Reading:
    place: str
    version: int
    key: str
    partitions: int
    marks: pa.Array

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            for p in batch.column("p").to_pylist():
                yield from self._packed(p)

    def _packed(self, partition: int) -> Iterator[pa.RecordBatch]:
        fs, path = resolve_fs(handoff_place(self.place, self.version, partition))
        table = pq.read_table(path, filesystem=fs)
        if table.num_rows == 0:
            return
        where = spark_partitions(table.column(self.key), self.partitions)
        for target in sorted(set(where.tolist())):
            rows = table.filter(pa.array(where == target))
            sink = pa.BufferOutputStream()
            with pa.ipc.new_stream(sink, rows.schema) as writer:
                writer.write_table(rows)
            yield pa.RecordBatch.from_pydict(
                {self.key: self.marks.take([target]), _ROWS: [sink.getvalue().to_pybytes()]}
            )


def _unpacked(received: list[pa.RecordBatch], schema: pa.Schema) -> pa.Table | None:
    streams = [v for b in received for v in b.column(_ROWS).to_pylist()]
    if not streams:
        return None
    return pa.concat_tables(pa.ipc.open_stream(s).read_all() for s in streams).cast(schema)


def follow_on_task(
    settings: KeyedSettings, plan: BatchPlan, batches: Iterator[pa.RecordBatch]
) -> Iterator[pa.RecordBatch]:
    """The Spark task of one partition of the follow-on: its rows unpacked, then the
    partition step with the first step's plan; one row of counts."""
    from pyspark import TaskContext

    context = TaskContext.get()
    assert context is not None  # a Spark task's
    partition = context.partitionId()
    rows = _unpacked(list(batches), settings.input_schema)
    check_placement(rows, declared(settings.processor).key, partition, settings.partitions)
    yield counts_batch(run_partition(settings, plan, partition, rows))


def run_follow_on(anchor: DataFrame, settings: KeyedSettings, plan: BatchPlan) -> list[dict]:
    """Steps 1-3 of the module doc: the follow-on's batch on every partition; returns the
    tasks' counts. `anchor` is any DataFrame of the batch (its session runs the job)."""
    d = declared(settings.processor)
    n = settings.partitions
    marks = mark_keys(n, d.key_type)
    key_type = T.LongType() if d.key_type == pa.int64() else T.StringType()
    packed = T.StructType([T.StructField(d.key, key_type), T.StructField(_ROWS, T.BinaryType())])
    ids = frame_of(anchor.sparkSession, pa.table({"p": pa.array(range(n), pa.int64())}))
    reading = _Reading(settings.handoff, plan.version, d.key, n, marks)
    shuffled = ids.repartition(n).mapInArrow(reading, packed).repartition(n, d.key)
    counts, _, _ = collect_partitions(
        shuffled,
        functools.partial(follow_on_task, settings, plan),
        lambda latest: functools.partial(missing_task, settings, plan),
        n,
    )
    return counts
