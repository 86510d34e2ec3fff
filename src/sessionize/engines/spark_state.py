"""The `spark` engine: session state in Spark's own state store (`--state spark-*`).

One streaming query, one source, one sink:

    source -> parse (valid events and invalid lines, as data)
      -> withWatermark(event_time, lateness)
      -> project: event time as µs (the operator sees no watermarked column), and a key:
         the user id, or 0 ("" for string ids) for an invalid line without one
      -> groupBy(key).transformWithState(RocksSessionProcessor, EventTime)     spark-rocksdb
                     .applyInPandasWithState(..., EventTimeTimeout)       spark-hdfs
         rows of one wide schema: sessions, page_views, late_events, invalid_events, stats
      -> foreachBatch: split by kind, stage per task, publish per batch id

Invalid lines pass through the operator rather than around it: a second branch from the
same source would make Spark run two source instances, read every batch twice, and let
their batches drift apart. The per-key step hands them straight to `invalid_events`.

Watermark and late events. Spark's watermark for batch B is `max(event_time of batches
before B) - lateness`, kept in its offset log: the contract's rule, in ms. Left to itself,
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

import contextlib
import functools
import json
from collections.abc import Iterator

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T
from typing_extensions import override

from sessionize import spark_version
from sessionize.config import SessionRules
from sessionize.engines.checkpoint import offset_log
from sessionize.engines.runner import (
    RETAIN,
    RETAIN_CONF,
    BatchRequest,
    BatchResult,
    Engine,
    Parser,
)
from sessionize.engines.session_report import SUMMED, session_line
from sessionize.engines.sessions import SessionSettings
from sessionize.engines.spark_processor import (
    KEY,
    PANDAS_STATE_DDL,
    STATS,
    STATS_FIELDS,
    Shapes,
    session_step_pandas,
    spark_type,
)
from sessionize.faults import pause_point
from sessionize.fs import listing, resolve_fs
from sessionize.mapping import EventMapping
from sessionize.parsing import parse
from sessionize.sinks.base import Sink
from sessionize.timezones import local_days

PROVIDERS = {
    "spark-rocksdb": "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider",
    "spark-hdfs": "org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider",
}
PROVIDER_CONF = "spark.sql.streaming.stateStore.providerClass"
RECORDS_DIR = "sessionize-batches"
TRIM_EVERY = 10  # batches between clean-ups of the batch records
# Spark's key for the watermark delay of a column (EventTimeWatermark.delayKey).
_DELAY_KEY = "spark.watermarkDelayMs"

# What every writer task reports to the driver.
TASK_COUNTERS = ("invalid", "sessions_out", "page_views_out", "late", "events_out", *STATS_FIELDS)
_TASK_SCHEMA = T.StructType([T.StructField(c, T.LongType()) for c in TASK_COUNTERS])
_OUTPUT_KIND = {
    "sessions": "sessions_out",
    "page_views": "page_views_out",
    "late_events": "late",
    "invalid_events": "invalid",
    "events": "events_out",
}


# ---------------------------------------------------------------------------- the query


def session_rows(
    parsed: DataFrame, state: str, rules: SessionRules, mapping: EventMapping | None = None
) -> DataFrame:
    """Parsed lines -> the wide rows of all four outputs and the step counters."""
    sh = Shapes(mapping or EventMapping())
    # Invalid lines without a user go to one key; a valid user id is never empty.
    no_user = F.lit("") if sh.layout.string_keys else F.lit(0)
    lateness_ms = rules.lateness_us // 1000
    # Invalid lines count as the epoch for the watermark's max, also those with an event
    # time (e.g. one from the future): only valid events move the watermark.
    epoch = F.timestamp_micros(F.lit(0))
    valid_time = F.when(F.col("reason").isNull(), F.col("event_time"))
    rows = (
        parsed.withColumn("_event_time", F.coalesce(valid_time, epoch))
        .withWatermark("_event_time", f"{lateness_ms} milliseconds")
        .select(
            F.coalesce("user_id", no_user).alias(KEY),
            "user_id",
            F.unix_micros("event_time").alias("event_us"),
            *sh.input_columns[2:],
        )
    )
    wide_type = spark_type(sh.wide)
    if state == "spark-rocksdb":
        spark_version.require("transform_with_state", "--state spark-rocksdb")
        from sessionize.engines.spark_rocksdb import RocksSessionProcessor

        return rows.groupBy(KEY).transformWithState(
            RocksSessionProcessor(rules, sh.mapping), wide_type, "Append", "EventTime"
        )
    if state == "spark-hdfs":
        spark_version.require("pandas_with_state", "--state spark-hdfs")
        # The analyzer requires a watermarked input column for event-time timeouts; this
        # one is NULL, so Spark's late-row filter (`column <= watermark`) keeps every row.
        tag = F.lit(None).cast("timestamp").alias("_watermark", metadata={_DELAY_KEY: lateness_ms})
        return (
            rows.select(KEY, *sh.input_columns, tag)
            .groupBy(KEY)
            .applyInPandasWithState(
                session_step_pandas(rules, sh.mapping),
                wide_type,
                PANDAS_STATE_DDL,
                "Append",
                "EventTimeTimeout",
            )
        )
    raise ValueError(f"not a Spark state: {state}")


# ---------------------------------------------------------------------------- the writer


def _write_task(
    sink: Sink, sh: Shapes, timezone: str, batch_id: int, batches: Iterator[pa.RecordBatch]
):
    """Stage this task's rows of each output (step 1); yield its counters."""
    from pyspark import TaskContext

    context = TaskContext.get()
    assert context is not None  # a Spark task's
    partition = context.partitionId()
    received = [b for b in batches if b.num_rows]
    wide = (
        pa.Table.from_batches(received).cast(sh.wide) if received else sh.wide.empty_table()
    ).combine_chunks()
    counts = dict.fromkeys(TASK_COUNTERS, 0)
    for name, schema in sh.layout.outputs.items():
        rows = wide.filter(pc.equal(wide["kind"], name))
        counts[_OUTPUT_KIND[name]] = sink.write_part(
            name, batch_id, partition, narrow(schema, rows, timezone)
        )
    stats = wide.filter(pc.equal(wide["kind"], STATS))
    for name in STATS_FIELDS:
        counts[name] = pc.sum(stats[name]).as_py() or 0
    # The operator's state commit ran when its output iterator ended, before this point.
    pause_point("after-state-commit", batch_id)
    yield pa.RecordBatch.from_pydict({k: [counts[k]] for k in TASK_COUNTERS})


def narrow(schema: pa.Schema, wide: pa.Table, timezone: str = "UTC") -> pa.Table:
    """Wide rows of one kind -> the output's own schema (timestamps back, session_date: the
    start's date in `timezone`)."""
    arrays = []
    for f in schema:
        if f.name == "session_date":
            start = wide["start_time"].cast(pa.int64()).to_numpy(zero_copy_only=False)
            days = local_days(start, timezone)
            arrays.append(pa.array(days, pa.int32()).view(pa.date32()))
        else:
            arrays.append(wide[f.name].cast(f.type))
    return pa.Table.from_arrays(arrays, schema=schema)


class BatchRecords:
    """The engine's record of each published batch, kept in the checkpoint (step 3)."""

    def __init__(self, checkpoint: str):
        self.checkpoint = checkpoint
        self.fs, self.base = resolve_fs(checkpoint)
        self.dir = f"{self.base}/{RECORDS_DIR}"

    def watermark(self, batch_id: int) -> int | None:
        """Spark's watermark of a batch (µs), as its offset log fixed it; None before any."""
        entry = offset_log(self.checkpoint, batch_id)
        ms = entry[0].get("batchWatermarkMs", 0) if entry else 0
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

    def trim(self, last: int, retain: int = RETAIN) -> None:
        """Delete the records of batches before the `retain` newest up to `last`: no rewind
        goes further back (Spark keeps as many batches of its logs)."""
        for info in listing(self.fs, self.dir):
            name = info.base_name
            if name.endswith(".json") and name[:-5].isdigit() and int(name[:-5]) <= last - retain:
                with contextlib.suppress(FileNotFoundError):
                    self.fs.delete_file(info.path)

    def drop_after(self, batch: int) -> None:
        """Delete the records of batches after `batch`, newest first (a rewind)."""
        infos = listing(self.fs, self.dir)
        ids = [
            int(i.base_name[:-5])
            for i in infos
            if i.base_name.endswith(".json") and i.base_name[:-5].isdigit()
        ]
        for b in sorted((b for b in ids if b > batch), reverse=True):
            with contextlib.suppress(FileNotFoundError):
                self.fs.delete_file(f"{self.dir}/{b}.json")


class SparkStateEngine(Engine):
    """Driver side of the `spark` engine: stages and counts what the operator emitted.

    Its input is the operator's output (`stream_input`), so by the time `run` sees a batch
    Spark has already run the stateful step; the state version of the batch is committed
    when the writer tasks have consumed it (step 1 of the module doc).
    """

    summed = SUMMED

    def __init__(
        self, settings: SessionSettings, checkpoint: str, sink: Sink, parser: Parser = parse
    ):
        assert settings.rules is not None  # a session job's settings
        self.state = settings.state_uri  # `spark-rocksdb` or `spark-hdfs`
        self.mapping = settings.mapping
        self.rules = settings.rules
        self.partitions = settings.partitions
        self.max_future_us = settings.max_future_us
        self.parser = parser
        self.sink = sink
        self.records = BatchRecords(checkpoint)

    @override
    def query_confs(self) -> dict[str, str]:
        """The provider and the shuffle partitions (= `--partitions`, the state's
        partitions); Spark keeps both in the checkpoint from the first start on."""
        return {
            PROVIDER_CONF: PROVIDERS[self.state],
            "spark.sql.shuffle.partitions": str(self.partitions),
            RETAIN_CONF: str(RETAIN),
        }

    @override
    def stream_input(self, raw: DataFrame) -> DataFrame:
        # In a streaming query current_timestamp() is the batch's time from the offset log,
        # the same on a re-executed batch.
        parsed = self.parser(raw, now=F.current_timestamp(), max_future_us=self.max_future_us)
        return session_rows(parsed, self.state, self.rules, self.mapping)

    @override
    def previous_record(self, request: BatchRequest) -> dict:
        return self.records.read(request.previous) or {}

    @override
    def run(self, rows: DataFrame, request: BatchRequest, previous: dict) -> BatchResult:
        batch_id = request.version
        task = functools.partial(
            _write_task, self.sink, Shapes(self.mapping), self.rules.timezone, batch_id
        )
        reports = rows.mapInArrow(task, _TASK_SCHEMA).collect()  # step 1
        batch = {k: sum(r[k] for r in reports) for k in TASK_COUNTERS}
        batch["records"] = batch["events_in"] + batch["invalid"]
        batch["late"] = batch["events_in"] - batch["on_time"]
        before = previous.get("batch", {})
        batch["open_sessions"] = before.get("open_sessions", 0) + batch["open_sessions_delta"]
        batch["open_users"] = before.get("open_users", 0) + batch["open_users_delta"]
        # The watermark this batch was judged and emitted by (Spark's, in µs).
        return BatchResult(batch, self.records.watermark(batch_id))

    @override
    def progress_line(self, label: str, record: dict) -> str:
        return session_line(label, record)

    @override
    def write_record(self, version: int, record: dict) -> None:
        self.records.write(version, record)  # step 3

    @override
    def after_commit(self, version: int) -> None:
        if version % TRIM_EVERY == 0:
            self.records.trim(version)
