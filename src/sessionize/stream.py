"""`sessionize stream`: a Structured Streaming query driving an engine per micro-batch."""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime

from pyspark.sql import DataFrame, SparkSession

from sessionize.config import SessionRules, format_duration, parse_duration, redact_uri
from sessionize.engines.checkpoint import (
    batch_timestamp_us,
    check_or_record,
    last_committed_batch,
)
from sessionize.engines.store import EngineSettings, StoreEngine
from sessionize.errors import ConfigError, SessionizeError, StateError
from sessionize.sources.files import file_stream
from sessionize.spark import get_spark
from sessionize.state import open_backend
from sessionize.state.base import StateBackend

SPARK_STATES = ("spark-rocksdb", "spark-hdfs")


@dataclass(frozen=True)
class StreamOptions:
    input: str
    output: str
    checkpoint: str
    state: str = "files"
    rules: SessionRules = field(default_factory=SessionRules)
    partitions: int = 4
    max_files_per_trigger: int | None = None
    trigger: str = "available-now"
    job: str = "sessionize"
    source_options: dict[str, str] = field(default_factory=dict)
    # Not recorded in the checkpoint: a rule on input, not part of the state.
    max_future_us: int | None = 86_400_000_000

    def state_uri(self) -> str:
        """`files` keeps the store under the checkpoint; `files:PATH` puts it elsewhere."""
        if self.state == "files":
            return f"files:{self.checkpoint.rstrip('/')}/state"
        return self.state

    def recorded_settings(self) -> dict[str, object]:
        """What the checkpoint is bound to (see engines.checkpoint)."""
        return {
            "state": redact_uri(self.state_uri() if self.state != "files" else "files"),
            "gap": format_duration(self.rules.gap_us),
            "lateness": format_duration(self.rules.lateness_us),
            "close_actions": ",".join(self.rules.close_actions),
            "partitions": self.partitions,
            "job": self.job,
        }


def parse_trigger(text: str) -> dict[str, object]:
    """`available-now` or `processing-time=30s` -> DataStreamWriter.trigger kwargs."""
    if text == "available-now":
        return {"availableNow": True}
    m = re.fullmatch(r"processing-time=(.+)", text)
    if m:
        seconds = parse_duration(m.group(1)) / 1e6
        return {"processingTime": f"{seconds:g} seconds"}
    raise ConfigError(f"--trigger '{text}': use available-now or processing-time=DURATION")


def source_frame(spark: SparkSession, opts: StreamOptions) -> DataFrame:
    """The raw records (value, error, source) of --input."""
    if opts.input.startswith("kafka://"):
        from sessionize.sources.kafka import kafka_stream

        return kafka_stream(spark, opts.input, opts.source_options)
    if opts.input.startswith("kinesis://"):
        from sessionize.sources.kinesis import kinesis_stream

        return kinesis_stream(spark, opts.input, opts.source_options)
    return file_stream(spark, opts.input, opts.max_files_per_trigger)


def format_progress(record: dict) -> str:
    b = record["batch"]
    wm = record["watermark"]
    wm_text = "none" if wm is None else _iso(wm)
    return (
        f"batch {record['version']}: {b['records']:,} events in, "
        f"{b['sessions_out']:,} sessions out, {b['late']:,} late, {b['invalid']:,} invalid, "
        f"{b['open_sessions']:,} open sessions, watermark {wm_text}, {record['duration_s']:.1f}s"
    )


def _iso(us: int) -> str:
    return datetime.fromtimestamp(us / 1e6, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def run_stream(
    opts: StreamOptions,
    spark: SparkSession | None = None,
    on_batch: Callable[[str], None] = print,
) -> list[dict]:
    """Run the query until the trigger ends it; returns the job records of this run.

    Everything that can be checked without Spark (input, checkpoint settings, the state
    backend and its agreement with the checkpoint) is checked before Spark starts.
    """
    _check_input(opts.input)
    check_or_record(opts.checkpoint, opts.recorded_settings())
    if opts.state in SPARK_STATES:
        from sessionize.engines.spark_state import run_spark_state

        spark = spark or get_spark(f"sessionize-{opts.job}", shuffle_partitions=opts.partitions)
        return run_spark_state(spark, opts, on_batch)
    settings = EngineSettings(
        rules=opts.rules,
        partitions=opts.partitions,
        state_uri=opts.state_uri(),
        job=opts.job,
        output=opts.output,
        max_future_us=opts.max_future_us,
    )
    backend = open_backend(settings.state_uri)
    backend.check()
    _check_agreement(backend, opts)
    spark = spark or get_spark(f"sessionize-{opts.job}", shuffle_partitions=opts.partitions)
    engine = StoreEngine(spark, settings, backend)
    records: list[dict] = []
    failure: list[SessionizeError] = []

    def each_batch(df: DataFrame, batch_id: int) -> None:
        try:
            now_us = batch_timestamp_us(opts.checkpoint, batch_id)
            record = engine.run(df, batch_id, first=batch_id == 0, now_us=now_us)
        except SessionizeError as exc:
            failure.append(exc)
            raise
        records.append(record)
        on_batch(format_progress(record))

    run_foreach_batch(source_frame(spark, opts), opts, each_batch, failure)
    return records


def run_foreach_batch(
    frame: DataFrame,
    opts: StreamOptions,
    each_batch: Callable[[DataFrame, int], None],
    failure: list[SessionizeError],
) -> None:
    """Run `each_batch` over `frame` until the trigger ends; a SessionizeError that
    `each_batch` recorded in `failure` is raised as itself, not as Spark's wrapper."""
    query = (
        frame.writeStream.queryName(f"sessionize-{opts.job}")
        .foreachBatch(each_batch)
        .option("checkpointLocation", opts.checkpoint)
        .trigger(**parse_trigger(opts.trigger))
        .start()
    )
    try:
        query.awaitTermination()
    except Exception:
        if failure:
            raise failure[0] from None
        raise
    finally:
        if query.isActive:
            query.stop()


def _check_input(path: str) -> None:
    if "://" in path and not path.startswith("file://"):
        return
    local = path.removeprefix("file://")
    if not os.path.isdir(local):
        raise ConfigError(f"--input {path} is not a directory (expected the hourly JSON tree)")


def _check_agreement(backend: StateBackend, opts: StreamOptions) -> None:
    """Spark's commit log and the store's job log must point at the same batch."""
    spark_last = last_committed_batch(opts.checkpoint)
    versions = backend.job_versions(opts.job)
    store_last = max(versions) if versions else None
    done = -1 if spark_last is None else spark_last
    # The store may be one batch ahead: it commits just before Spark does.
    if (store_last is None and spark_last is None) or store_last in (done, done + 1):
        return
    raise StateError(
        f"checkpoint {opts.checkpoint} has committed batch {spark_last} but state "
        f"{redact_uri(opts.state_uri())} has batch {store_last} for job '{opts.job}': they belong "
        "to different runs; use the state that goes with this checkpoint, or new ones"
    )
