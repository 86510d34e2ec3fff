"""The `spark` engine: session state in Spark's own state store (`--state spark-*`).

One streaming query, one source, one sink:

    source -> parse (valid events and invalid lines, as data)
      -> withWatermark(event_time, lateness)
      -> project: event time as µs (the operator sees no watermarked column), and a key:
         the user id, or 0 for an invalid line without one
      -> groupBy(key).transformWithState(SessionProcessor, EventTime)     spark-rocksdb
                     .applyInPandasWithState(..., EventTimeTimeout)       spark-hdfs
         rows of one wide schema: sessions, page_views, late_events, invalid_events, stats
      -> foreachBatch: split by kind, stage per task, publish per batch id

Invalid lines pass through the operator rather than around it: a second branch from the
same source would make Spark run two source instances, read every batch twice, and let
their batches drift apart. The per-key step hands them straight to `invalid_events`.

Watermark and late events. Spark's watermark for batch B is `max(event_time of batches
before B) - lateness`, kept in its offset log: DESIGN §3's rule, in ms. Left to itself,
Spark would silently drop the rows older than a watermark in the stateful operator, and
`late_events` would miss them. So the operator's input has no watermarked column (the
event time is projected to µs; applyInPandasWithState, which insists on one, gets a NULL
timestamp column tagged with the delay, which no filter can drop), every event reaches the
per-user step, and `logic.advance` judges lateness there with Spark's watermark of the
batch (`event_time < watermark`). `late_events` are those of the `files` state when event
times and lateness are whole milliseconds (the lateness always is: durations are ms at
least); with finer event times Spark's watermark is up to 1 ms lower, and an event in that
millisecond counts as on time here.

Emission. The `store` engine emits a session at the end of the batch whose own events move
the watermark past `closed_at`. Spark's stateful operators only see a watermark at the
start of a batch, so the same session is emitted in the next batch: the no-data batch that
Spark runs as soon as a watermark advanced (timers fire; also at the end of an
available-now run), or the next data batch. Same watermark, same state, so the same
`sessions` and `page_views` rows; only their `batch_id` differs from the `store` engine's.

Exactly once. Each batch, in this order:

  1. the tasks run the stateful operator (Spark commits state version B per partition) and
     stage their rows of the four outputs under `_staging` (deterministic file names);
  2. the driver publishes the staged batch B (one directory rename per output);
  3. the driver writes its batch record `sessionize-batches/B.json` in the checkpoint;
  4. foreachBatch returns and Spark writes its commit log entry for B.

After a crash before (4), Spark re-runs batch B with the offsets and watermark it logged,
on state version B-1, so the processor sees the same input and state and produces the
same rows; step 2 then replaces the batch's directories. The outputs equal an
uninterrupted run's.

The state lives in the checkpoint, in the provider chosen by `--state`. Spark cannot
change the provider of an existing checkpoint, and `sessionize.json` records `--state`,
so reusing a checkpoint with another state is refused with one line (engines.checkpoint).
"""

from __future__ import annotations

import functools
import json
import time
from collections.abc import Callable, Iterator

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from sessionize.config import SessionRules
from sessionize.engines.spark_processor import (
    INPUT_COLUMNS,
    KEY,
    PANDAS_STATE_DDL,
    STATS,
    STATS_FIELDS,
    WIDE,
    SessionProcessor,
    session_step_pandas,
    spark_type,
)
from sessionize.errors import SessionizeError
from sessionize.faults import pause_point
from sessionize.parsing import parse
from sessionize.schema import OUTPUTS
from sessionize.sinks.parquet import ParquetSink, resolve_fs

PROVIDERS = {
    "spark-rocksdb": "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider",
    "spark-hdfs": "org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider",
}
PROVIDER_CONF = "spark.sql.streaming.stateStore.providerClass"
RECORDS_DIR = "sessionize-batches"
# Spark's key for the watermark delay of a column (EventTimeWatermark.delayKey).
_DELAY_KEY = "spark.watermarkDelayMs"

# What every writer task reports to the driver.
TASK_COUNTERS = ("invalid", "sessions_out", "page_views_out", "late", *STATS_FIELDS)
_TASK_SCHEMA = ", ".join(f"{c} long" for c in TASK_COUNTERS)
_OUTPUT_KIND = {
    "sessions": "sessions_out",
    "page_views": "page_views_out",
    "late_events": "late",
    "invalid_events": "invalid",
}


# ---------------------------------------------------------------------------- the query


def session_rows(parsed: DataFrame, state: str, rules: SessionRules) -> DataFrame:
    """Parsed lines -> the wide rows of all four outputs and the step counters."""
    lateness_ms = rules.lateness_us // 1000
    # Invalid lines count as the epoch for the watermark's max, also those with an event
    # time (e.g. one from the future): only valid events move the watermark.
    epoch = F.timestamp_micros(F.lit(0))
    valid_time = F.when(F.col("reason").isNull(), F.col("event_time"))
    rows = (
        parsed.withColumn("_event_time", F.coalesce(valid_time, epoch))
        .withWatermark("_event_time", f"{lateness_ms} milliseconds")
        .select(
            F.coalesce("user_id", F.lit(0)).alias(KEY),
            "user_id",
            F.unix_micros("event_time").alias("event_us"),
            *INPUT_COLUMNS[2:],
        )
    )
    wide_type = spark_type(WIDE)
    if state == "spark-rocksdb":
        return rows.groupBy(KEY).transformWithState(
            SessionProcessor(rules), wide_type, "Append", "EventTime"
        )
    if state == "spark-hdfs":
        # The analyzer requires a watermarked input column for event-time timeouts; this
        # one is NULL, so Spark's late-row filter (`column <= watermark`) keeps every row.
        tag = F.lit(None).cast("timestamp").alias("_watermark", metadata={_DELAY_KEY: lateness_ms})
        return (
            rows.select(KEY, *INPUT_COLUMNS, tag)
            .groupBy(KEY)
            .applyInPandasWithState(
                session_step_pandas(rules), wide_type, PANDAS_STATE_DDL, "Append",
                "EventTimeTimeout",
            )
        )  # fmt: skip
    raise ValueError(f"not a Spark state: {state}")


# ---------------------------------------------------------------------------- the writer


def _write_task(output: str, batch_id: int, batches: Iterator[pa.RecordBatch]):
    """Stage this task's rows of each output (step 1); yield its counters."""
    from pyspark import TaskContext

    partition = TaskContext.get().partitionId()
    received = [b for b in batches if b.num_rows]
    wide = (
        pa.Table.from_batches(received).cast(WIDE) if received else WIDE.empty_table()
    ).combine_chunks()
    sink = ParquetSink(output)
    counts = dict.fromkeys(TASK_COUNTERS, 0)
    for name in OUTPUTS:
        rows = wide.filter(pc.equal(wide["kind"], name))
        counts[_OUTPUT_KIND[name]] = sink.write_part(name, batch_id, partition, narrow(name, rows))
    stats = wide.filter(pc.equal(wide["kind"], STATS))
    for name in STATS_FIELDS:
        counts[name] = pc.sum(stats[name]).as_py() or 0
    # The operator's state commit ran when its output iterator ended, before this point.
    pause_point("after-state-commit", batch_id)
    yield pa.RecordBatch.from_pydict({k: [counts[k]] for k in TASK_COUNTERS})


def narrow(name: str, wide: pa.Table) -> pa.Table:
    """Wide rows of one kind -> the output's own schema (timestamps back, session_date)."""
    schema = OUTPUTS[name]
    arrays = []
    for f in schema:
        if f.name == "session_date":
            days = pc.divide(wide["start_time"], pa.scalar(86_400_000_000, pa.int64()))
            arrays.append(days.cast(pa.int32()).cast(pa.date32()))
        else:
            arrays.append(wide[f.name].cast(f.type))
    return pa.Table.from_arrays(arrays, schema=schema)


class BatchRecords:
    """The engine's record of each published batch, kept in the checkpoint (step 3)."""

    def __init__(self, checkpoint: str):
        self.fs, self.base = resolve_fs(checkpoint)
        self.dir = f"{self.base}/{RECORDS_DIR}"

    def watermark(self, batch_id: int) -> int | None:
        """Spark's watermark of a batch (µs), as its offset log fixed it; None before any."""
        with self.fs.open_input_stream(f"{self.base}/offsets/{batch_id}") as f:
            metadata = json.loads(f.read().decode().splitlines()[1])
        ms = metadata.get("batchWatermarkMs", 0)
        return ms * 1000 if ms > 0 else None

    def read(self, batch_id: int) -> dict | None:
        try:
            with self.fs.open_input_stream(f"{self.dir}/{batch_id}.json") as f:
                return json.loads(f.read())
        except FileNotFoundError:
            return None

    def write(self, batch_id: int, record: dict) -> None:
        self.fs.create_dir(self.dir, recursive=True)
        tmp = f"{self.dir}/.{batch_id}.json.tmp"
        with self.fs.open_output_stream(tmp) as f:
            f.write(json.dumps(record, sort_keys=True).encode())
        self.fs.move(tmp, f"{self.dir}/{batch_id}.json")


_TOTALS = ("records", "invalid", "events_in", "late", "duplicates", "sessions_out")


class SparkStateEngine:
    """Driver side: runs steps 1-3 for each batch that Spark hands to foreachBatch."""

    def __init__(self, output: str, checkpoint: str):
        self.output = output
        self.sink = ParquetSink(output)
        self.records = BatchRecords(checkpoint)

    def run(self, rows: DataFrame, batch_id: int) -> dict:
        t0 = time.perf_counter()
        prev = self.records.read(batch_id - 1) or {}
        self.sink.clear_staging(batch_id)
        task = functools.partial(_write_task, self.output, batch_id)
        reports = rows.mapInArrow(task, _TASK_SCHEMA).collect()  # step 1
        batch = {k: sum(r[k] for r in reports) for k in TASK_COUNTERS}
        pause_point("before-publish", batch_id)
        self.sink.publish(batch_id)  # step 2
        pause_point("after-publish", batch_id)
        batch["records"] = batch["events_in"] + batch["invalid"]
        batch["late"] = batch["events_in"] - batch["on_time"]
        before = prev.get("batch", {})
        batch["open_sessions"] = before.get("open_sessions", 0) + batch["open_sessions_delta"]
        batch["open_users"] = before.get("open_users", 0) + batch["open_users_delta"]
        totals = {k: prev.get("totals", {}).get(k, 0) + batch[k] for k in _TOTALS}
        record = {
            "version": batch_id,
            # The watermark this batch was judged and emitted by (Spark's, in µs).
            "watermark": self.records.watermark(batch_id),
            "batch": batch,
            "totals": totals,
            "duration_s": round(time.perf_counter() - t0, 3),
        }
        self.records.write(batch_id, record)  # step 3
        pause_point("after-record", batch_id)
        return record


# ---------------------------------------------------------------------------- running it


def run_spark_state(
    spark: SparkSession, opts, on_batch: Callable[[str], None] = print
) -> list[dict]:
    """`sessionize stream --state spark-*`: run the query until the trigger ends it.

    `opts` is a `stream.StreamOptions` whose checkpoint settings were already checked. The
    provider and the shuffle partitions (= `--partitions`, the state's partitions) are set
    on the session for the life of this query, then restored; Spark keeps both in the
    checkpoint from the first start on.
    """
    from sessionize.stream import format_progress, run_foreach_batch, source_frame

    confs = {
        PROVIDER_CONF: PROVIDERS[opts.state],
        "spark.sql.shuffle.partitions": str(opts.partitions),
    }
    saved = {k: spark.conf.get(k, None) for k in confs}
    engine = SparkStateEngine(opts.output, opts.checkpoint)
    records: list[dict] = []
    failure: list[SessionizeError] = []

    def each_batch(df: DataFrame, batch_id: int) -> None:
        try:
            record = engine.run(df, batch_id)
        except SessionizeError as exc:
            failure.append(exc)
            raise
        records.append(record)
        on_batch(format_progress(record))

    for k, v in confs.items():
        spark.conf.set(k, v)
    try:
        # In a streaming query current_timestamp() is the batch's time from the offset log,
        # the same on a re-executed batch.
        parsed = parse(
            source_frame(spark, opts), now=F.current_timestamp(), max_future_us=opts.max_future_us
        )
        rows = session_rows(parsed, opts.state, opts.rules)
        run_foreach_batch(rows, opts, each_batch, failure)
    finally:
        for k, v in saved.items():
            if v is None:
                spark.conf.unset(k)
            else:
                spark.conf.set(k, v)
    return records
