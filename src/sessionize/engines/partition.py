"""One partition of one batch on our store, for every job: sessions and any processor.

A batch is one state version and one Spark job: Spark shuffles the job's input rows by the
processor's key into `partitions` partitions, together with the batch marks from which
every partition task derives the batch's watermark (engines/batch_marks.py), and every
partition task (the N tasks always run, also with no rows, so that timers fire everywhere
and every partition reaches the new version):

  0. adds up the marks: the batch's lines and latest event time, hence its watermark,
  1. sets the input's invalid rows aside (the job's settings say how they are marked),
  2. opens its state at version V-1 (a worker-side cache usually makes this free),
  3. reads the rows of the keys with new rows and of the keys whose timer is due (every
     key, when an output replaced by key must be rebuilt),
  4. calls the core's `step` (stateful/step.py) with the processor, vectorized,
  5. stages its rows of every output and of the invalid output under `_staging`
     (deterministic file names), and the keys an output replaced by key had replaced,
  6. commits state version V for its partition (idempotent: a rerun overwrites V), with
     the processor's gauges (`Processor.gauges`) summed in the partition's meta.

The engine's driver side (engines/keyed.py) then publishes the staged outputs, writes the
job record of version V and returns to Spark, which writes its commit log entry. A crash
before that makes Spark re-execute batch V with the same input (its offsets log fixed it);
the rerun loads V-1 again, restages, republishes over the old batch and overwrites version
V, so the final output equals an uninterrupted run. Versions after V-1 left by an
interrupted attempt are never read: version V is only loaded once its job record exists,
and it is rewritten before that.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql import DataFrame
from pyspark.sql import types as T

from sessionize.core.declared import NEVER_US, Declared, declared
from sessionize.core.keys import store_keys
from sessionize.core.partitioner import spark_partitions
from sessionize.core.step import PartitionStep, step
from sessionize.engines.batch_marks import split_marks
from sessionize.faults import pause_point
from sessionize.fs import child, resolve_fs
from sessionize.spark_arrow import frame_of

if TYPE_CHECKING:
    # A partition task reads the job's settings; keyed.py runs the tasks (no import at run time).
    from sessionize.engines.keyed import KeyedSettings

# The core's counts of a partition (stateful/step.py), then the store's own measures.
CORE_COUNTS = (
    "rows",
    "invalid",
    "late",
    "keys",
    "due",
    "state_rows_read",
    "state_rows_written",
    "state_keys_removed",
)
STORE_MEASURES = (
    "store_rows_loaded",
    "store_rows_written",
    "state_round_trips",
    "state_bytes_read",
    "state_bytes_written",
    "state_load_us",
    "state_commit_us",
)
TASK_FIELDS = ("partition", *CORE_COUNTS, "dropped", *STORE_MEASURES, "records", "latest")
# What a task returns: its counts, and the processor's counters as one JSON text (their
# names are the processor's). A Spark type, not DDL text: Spark would parse the text in the
# JVM for every batch's job.
# And what the job counts of its valid input (`KeyedSettings.input_counts`), as JSON too.
_TASK_ARROW = pa.schema(
    [*((k, pa.int64()) for k in TASK_FIELDS), ("counters", pa.string()), ("seen", pa.string())]
)
TASK_SCHEMA = T.StructType(
    [
        *(T.StructField(k, T.LongType()) for k in TASK_FIELDS),
        T.StructField("counters", T.StringType()),
        T.StructField("seen", T.StringType()),
    ]
)
EVERY_KEY_US = NEVER_US + 1  # every key's timer is before, "never" (an identity's) too


@dataclass(frozen=True)
class BatchPlan:
    version: int
    previous: int  # the version this one builds on (-1: the empty state)
    watermark_before: int | None
    watermark_after: int | None
    # Hand every key of the state to the processor, so that the batch republishes the whole
    # of an output replaced by key (it is behind the state: new, or emptied by a removal).
    refresh: bool = False


@dataclass(frozen=True)
class BatchBasis:
    """What the driver knows of a batch before its job: the plan, but for the batch's own
    latest event time, which the partition tasks learn from the batch marks."""

    version: int
    previous: int
    watermark_before: int | None
    max_event_before: int | None  # latest valid event time of the batches before
    end_watermark: int | None  # batch mode: the watermark is the end of the hour
    lateness_us: int
    refresh: bool = False  # BatchPlan.refresh

    def latest_event(self, latest: int | None) -> int | None:
        """The latest valid event time so far, given the batch's own."""
        return _max(self.max_event_before, latest)

    def plan(self, latest: int | None) -> BatchPlan:
        """Stream batches advance the watermark from the events (`max - lateness`), batch
        mode fixes it at the end of the hour; it never goes back."""
        max_event = self.latest_event(latest)
        if self.end_watermark is not None:
            after: int | None = self.end_watermark
        elif max_event is None:
            after = self.watermark_before
        else:
            after = max_event - self.lateness_us
        after = _max(self.watermark_before, after)
        return BatchPlan(self.version, self.previous, self.watermark_before, after, self.refresh)


def partition_task(
    settings: KeyedSettings, basis: BatchBasis, batches: Iterator[pa.RecordBatch]
) -> Iterator[pa.RecordBatch]:
    """The Spark task of one partition: step 0, then `run_partition`; one row of counts."""
    from pyspark import TaskContext

    context = TaskContext.get()
    assert context is not None  # a Spark task's
    partition = context.partitionId()
    received = list(batches)
    rows, records, latest = split_marks(pa.Table.from_batches(received) if received else None)
    check_placement(rows, declared(settings.processor).key, partition, settings.partitions)
    counts = run_partition(settings, basis.plan(latest), partition, rows)
    yield counts_batch({**counts, "records": records, "latest": latest})


def check_placement(rows: pa.Table | None, key: str, partition: int, partitions: int) -> None:
    """Refuse a partition's rows of which one's `key` belongs to another partition: the
    reading tasks pack rows where they compute Spark's placement (`stateful.partitioner`),
    and a key in two partitions would split its state. Raises RuntimeError: the batch
    fails, none of it published (engines/runner.py)."""
    if rows is None or rows.num_rows == 0:
        return
    where = spark_partitions(rows.column(key), partitions)
    if (where != partition).any():
        wrong = rows.column(key).take(pa.array(np.flatnonzero(where != partition)[:3]))
        raise RuntimeError(
            f"partition {partition} of {partitions} received rows of keys Spark places "
            f"elsewhere ({wrong.to_pylist()}): the placement computed in Arrow disagrees with "
            "Spark's shuffle; report this with the Spark version"
        )


def missing_task(
    settings: KeyedSettings, plan: BatchPlan, batches: Iterator[pa.RecordBatch]
) -> Iterator[pa.RecordBatch]:
    """Run the partitions named in `batches` (column `p`) with no rows."""
    for batch in batches:
        for partition in batch.column("p").to_pylist():
            yield counts_batch(run_partition(settings, plan, partition, None))


def counts_batch(counts: dict) -> pa.RecordBatch:
    """A partition's counts as the one row its task returns (a task that had no marks saw
    no lines and no latest event time)."""
    columns = {k: [counts.get(k, None if k == "latest" else 0)] for k in TASK_FIELDS}
    columns["counters"] = [json.dumps(counts.get("counters", {}))]
    columns["seen"] = [json.dumps(counts.get("seen", {}))]
    return pa.RecordBatch.from_pydict(columns, schema=_TASK_ARROW)


def run_partition(
    settings: KeyedSettings, plan: BatchPlan, partition: int, rows: pa.Table | None
) -> dict:
    """Steps 1-6 of the module doc for one partition; returns the task's counts."""
    d = declared(settings.processor)
    rows, invalid = settings.split_input(rows)
    seen = settings.input_counts(rows)
    backend = settings.open_state()
    store = backend.open(settings.job, partition, plan.previous, epoch=settings.epoch)
    try:
        keys = _input_store_keys(rows, d).unique()
        upto = EVERY_KEY_US if plan.refresh else plan.watermark_after if d.event_time else None
        if upto is not None:
            due = pa.array(store.expiring(upto), pa.int64())
            keys = pa.concat_arrays([keys, due]).unique()
        result = step(
            settings.processor,
            store.get_many(keys),
            rows,
            batch_id=plan.version,
            partition=partition,
            watermark_before=plan.watermark_before,
            watermark_after=plan.watermark_after,
            every_key=plan.refresh,
        )
        sink = settings.sink()
        _stage(sink, d, plan.version, partition, result, settings.handoff)
        if settings.stages_invalid:
            sink.write_part(settings.invalid_output, plan.version, partition, invalid)
        meta = dict(store.meta)
        for gauge in settings.processor.gauges:
            meta[gauge] = meta.get(gauge, 0) + result.counters.get(gauge, 0)
        store.remove_many(result.removes)
        store.put_many(result.puts)
        if partition == 0:
            pause_point("before-state-commit", plan.version)
        store.commit(plan.version, meta)
        if partition == 0:
            pause_point("after-state-commit", plan.version)
    except BaseException:
        store.abort()
        raise
    if plan.version % settings.maintenance_every == 0:
        backend.maintenance(settings.job, partition, settings.retain)
    m = store.metrics()
    # A gauge is reported as its running sum after the batch, not as the batch's change.
    counters = {**result.counters, **{g: meta[g] for g in settings.processor.gauges}}
    return {
        "partition": partition,
        **result.counts,
        "invalid": invalid.num_rows,
        "counters": counters,
        "seen": seen,
        "store_rows_loaded": m.rows_loaded,
        "store_rows_written": m.rows_written,
        "state_round_trips": m.round_trips,
        "state_bytes_read": m.bytes_read,
        "state_bytes_written": m.bytes_written,
        "state_load_us": int(m.load_ms * 1000),
        "state_commit_us": int(m.commit_ms * 1000),
    }


def _input_store_keys(rows: pa.Table, d: Declared) -> pa.Int64Array:
    """The store keys of the rows' keys: the input's own when it carries them (the session
    parse computes Spark's `xxhash64` of string ids), else computed (stateful/keys.py)."""
    if d.string_keys and d.store_key in rows.column_names:
        return rows.column(d.store_key).combine_chunks().cast(pa.int64())
    return store_keys(rows.column(d.key))


def _stage(
    sink, d: Declared, version: int, partition: int, result: PartitionStep, handoff: str
) -> None:
    """Step 5: every output's rows; for an output replaced by key, also the keys whose rows
    the batch replaces (those it wrote and those it deleted), once each. The output a
    follow-on takes goes to the batch's hand-off instead (engines/handoff.py)."""
    for name, table in result.outputs.items():
        if d.follow_on is not None and name == d.follow_on.output:
            handoff_rows(handoff, version, partition, table)
            continue
        out = d.outputs.get(name)
        if out is None or out.mode != "replace":
            sink.write_part(name, version, partition, table)
            continue
        key = list(out.key)
        keys = table.select(key)
        deletes = result.deletes.get(name)
        if deletes is not None:
            keys = pa.concat_tables([keys, deletes.select(key).cast(keys.schema)])
        keys = keys.group_by(key).aggregate([]).select(key)
        sink.write_replaced(name, version, partition, keys, table)


def handoff_place(place: str, version: int, partition: int) -> str:
    """The hand-off file of a partition of batch `version` (engines/handoff.py)."""
    return child(place, f"batch={version}", f"part-{partition:05d}.parquet")


def handoff_rows(place: str, version: int, partition: int, table: pa.Table) -> None:
    """A first-step task's rows for the follow-on: every partition writes its file, empty
    or not, since the second job reads all of them; a rerun overwrites it."""
    if not place:
        raise RuntimeError("a processor with a follow_on runs without a hand-off place")
    fs, path = resolve_fs(handoff_place(place, version, partition))
    fs.create_dir(path.rsplit("/", 1)[0], recursive=True)
    pq.write_table(table, path, filesystem=fs)


def collect_partitions(
    partitioned: DataFrame,
    task: Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]],
    missing: Callable[[int | None], Callable[[Iterator[pa.RecordBatch]], Iterator]],
    partitions: int,
) -> tuple[list[dict], int, int | None]:
    """Run `task` on every partition of `partitioned` (each returns one row of counts);
    returns the rows (`counters` decoded), the batch's lines and its latest event time
    (from the marks every task adds up). `missing(latest)` runs the partitions no row came
    to."""
    counts = [r.asDict() for r in partitioned.mapInArrow(task, TASK_SCHEMA).collect()]
    seen = {(c["records"], c["latest"]) for c in counts}
    if len(seen) > 1:  # every task adds up the same marks
        raise RuntimeError(f"partition tasks disagree on the batch's size: {sorted(seen)}")
    records, latest = seen.pop() if seen else (0, None)
    # Spark skips the tasks of an empty input (e.g. an hour with no files); those
    # partitions still have state to expire and a version to commit. DataFrames only (no
    # SparkContext), so that it runs over Spark Connect too.
    left = sorted(set(range(partitions)) - {c["partition"] for c in counts})
    if left:
        ids = frame_of(partitioned.sparkSession, pa.table({"p": pa.array(left)}))
        rows = ids.repartition(len(left)).mapInArrow(missing(latest), TASK_SCHEMA).collect()
        counts += [r.asDict() for r in rows]
    for c in counts:
        c["counters"] = json.loads(c["counters"])
        c["seen"] = json.loads(c["seen"])
    return counts, records, latest


def _max(a: int | None, b: int | None) -> int | None:
    return b if a is None else a if b is None else max(a, b)
