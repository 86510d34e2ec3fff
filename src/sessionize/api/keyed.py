"""`stateful.stream` and `stateful.run`: any `stateful.Processor` on the `store` engine, with
the session jobs' guarantees (exactly-once outputs, the checkpoint's lease and the store's
fence, the progress log, the checkpoint's settings check); engines/keyed.py runs the
batches."""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable

import pyarrow as pa
from pyspark.sql import DataFrame
from pyspark.sql.streaming import StreamingQuery

from sessionize.api.arguments import Duration, duration_us, parse_trigger, progress_path, state_uri
from sessionize.api.keyed_source import source
from sessionize.api.query import StreamRun, end_finished
from sessionize.api.recorded import recorded_state
from sessionize.api.workers import check_workers
from sessionize.engines.checkpoint import (
    batch_input,
    batch_timestamp_us,
    check_agreement,
    check_or_record_processor,
    checkpoint_lease,
    output_lease,
    processor_record,
    record_paths,
    refuse_if_rewinding,
)  # fmt: skip
from sessionize.engines.choice import engine_for
from sessionize.engines.keyed import KeyedEngine, KeyedSettings, settings_record
from sessionize.engines.ownership import check_run, check_stream, run_owner, stream_claim
from sessionize.engines.progress import ProgressLog
from sessionize.engines.runner import BatchRequest, BatchRunner, start_query
from sessionize.errors import ConfigError
from sessionize.fs import absolute_local, check_resolvable, child
from sessionize.redaction import redact_uri
from sessionize.sinks.claim import OwnerClaim
from sessionize.sinks.kafka import with_staging
from sessionize.sinks.owner import STATEFUL_STREAM
from sessionize.sinks.registry import capabilities, check_output, kind_of
from sessionize.spark_arrow import arrow_schema
from sessionize.state.lease import Lease
from sessionize.stateful.declared import declared
from sessionize.stateful.invalid import INVALID_OUTPUT, without_marks
from sessionize.stateful.processor import Processor

_LOG = logging.getLogger("sessionize")
__all__ = ["run", "source", "start", "stream"]


def start(
    df: DataFrame,
    processor: Processor,
    *,
    output: str,
    checkpoint: str,
    state: str = "files",
    partitions: int = 4,
    lateness: Duration = 0,
    trigger: str = "available-now",
    job: str = "stateful",
    output_format: str = "parquet",
    progress_log: str | None = None,
    on_batch: Callable[[str], None] | None = None,
) -> StreamRun:
    """`stream`, returning the run: its `query`, the committed batch `records`, and
    `wait()`, which waits for the end and raises a batch's SessionizeError as itself.

    Args and Raises: as for `stream`.

    Returns:
        The StreamRun.

    Example:
        >>> run = start(orders, Totals(), output="out/", checkpoint="chk/")  # doctest: +SKIP
        >>> records = run.wait()  # doctest: +SKIP
    """
    d = declared(processor)
    engine_for(state).check_runs_processors(state)
    if not df.isStreaming:
        raise ConfigError("stateful.stream needs a streaming DataFrame; use stateful.run")
    _check_columns(df, d.key, d.event_time)
    check_resolvable(checkpoint, "--checkpoint")
    output = with_staging(output, child(checkpoint, "kafka-staging"))
    check_output(output, output_format)
    spark_trigger = parse_trigger(trigger)
    end_finished(checkpoint)
    check_stream(checkpoint, output, job, STATEFUL_STREAM, d.name)  # before anything is written
    lease = checkpoint_lease(checkpoint)
    lease.acquire()
    held = [lease]
    try:
        refuse_if_rewinding(checkpoint)
        store_uri = _absolute(state_uri(state, child(checkpoint, "state")))
        settings = _settings(
            df, processor, store_uri, output, partitions, lateness, job, output_format
        )
        check_or_record_processor(checkpoint, {
            **settings_record(settings), "output": output, "output_format": output_format,
            "outputs": list(settings.processor_outputs), "state": recorded_state(state), "job": job,
        })  # fmt: skip
        writer = output_lease(output)  # the output is this checkpoint's while it runs
        writer.acquire()
        held.append(writer)
        claim = stream_claim(checkpoint, output, job, STATEFUL_STREAM, d.name)
        # What `history`, `rewind` and `status` need besides the settings (no secrets).
        record_paths(checkpoint, {
            "output": redact_uri(output), "output_format": output_format,
            "state": redact_uri(store_uri), "job": job, "progress_log": progress_log,
        })  # fmt: skip
        engine = _engine(df, settings, lease)
        check_agreement(engine.backend, checkpoint, store_uri, job)
        check_workers(df.sparkSession)
        log = progress_path(progress_log, checkpoint, "progress.jsonl")
        runner = BatchRunner(
            engine,
            on_batch or _LOG.info,
            progress=ProgressLog(log) if log else None,
            describe_input=functools.partial(batch_input, checkpoint),
            batch_time=functools.partial(batch_timestamp_us, checkpoint),
            lease=lease,
            claim=claim,
        )
        query, restore = start_query(
            df.sparkSession, runner, df, name=f"stateful-{job}", checkpoint=checkpoint,
            trigger=spark_trigger,
        )  # fmt: skip
    except BaseException:
        for taken in reversed(held):
            taken.release()
        raise
    ends = [restore, engine.sink.close, *(taken.release for taken in reversed(held))]
    return StreamRun(df.sparkSession, query, runner, ends, checkpoint)


def stream(
    df: DataFrame,
    processor: Processor,
    *,
    output: str,
    checkpoint: str,
    state: str = "files",
    partitions: int = 4,
    lateness: Duration = 0,
    trigger: str = "available-now",
    job: str = "stateful",
    output_format: str = "parquet",
    progress_log: str | None = None,
    on_batch: Callable[[str], None] | None = None,
) -> StreamingQuery:
    """Run `processor` over the streaming DataFrame `df`, exactly once; returns its query.

    Every micro-batch is one version of the state: the rows are shuffled by the
    processor's key into `partitions` partitions, each partition's keys go through
    `processor.process` once (stateful/step.py), and every output is written under
    `output/NAME/batch_id=N/` (Parquet) exactly once, whatever crashes and restarts. A
    restart with the same checkpoint resumes after its last committed batch; a restart with
    another processor, key, state schema, `params()`, partition count, lateness or output
    is refused in one line naming the difference. The checkpoint's lease is held while the
    query runs, and the store is fenced against the drivers before it.

    Args:
        df: A streaming DataFrame with the processor's key column (and event time column).
        processor: The processor.
        output: Where the outputs go: a local path or an `s3://` URI (Parquet).
        checkpoint: Spark's checkpoint of the query, plus the settings it is bound to and,
            with `state="files"`, the state.
        state: `files` (under the checkpoint), `files:PATH`, or a server URI
            (`postgresql://...`, `redis://...`, `dynamodb://...`).
        partitions: State partitions (part of the state: fixed at the first start).
        lateness: How far behind the latest event time the watermark stays ("10m", a
            timedelta or microseconds); ignored without `event_time`.
        trigger: `available-now` or `processing-time=30s`.
        job: The job's name in the state store (several jobs may share one store).
        output_format: `parquet` or `delta` (needed by outputs replaced by key).
        progress_log: Where the JSON line of each batch goes (default
            `CHECKPOINT/progress.jsonl`).
        on_batch: Called with each batch's one-line summary (default: the `sessionize`
            logger).

    Returns:
        Spark's StreamingQuery: `awaitTermination()`, `stop()`, `isActive`.

    Raises:
        ProcessorError: The processor is declared wrongly (and, from a batch, raised or
            returned what it did not declare); nothing of that batch is committed.
        ConfigError: A setting is wrong, `df` is not streaming or lacks a column.
        IncompatibleCheckpoint: The checkpoint was created with other settings.
        OutputOwned: The output belongs to another job (docs/concepts/outputs.md).
        LeaseHeld: Another driver runs on this checkpoint or writes the output.
        StateError: The state store is unreachable or does not match the checkpoint.

    Example:
        >>> from sessionize import stateful
        >>> query = stateful.stream(orders, Totals(), output="out/", checkpoint="chk/",
        ...                         state="files", partitions=4)  # doctest: +SKIP
        >>> query.awaitTermination()  # doctest: +SKIP
    """
    return start(
        df, processor, output=output, checkpoint=checkpoint, state=state,
        partitions=partitions, lateness=lateness, trigger=trigger, job=job,
        output_format=output_format, progress_log=progress_log, on_batch=on_batch,
    ).query  # fmt: skip


def run(
    df: DataFrame,
    processor: Processor,
    *,
    output: str,
    state: str,
    partitions: int = 4,
    lateness: Duration = 0,
    job: str = "stateful",
    output_format: str = "parquet",
    on_batch: Callable[[str], None] | None = None,
) -> dict:
    """Run `processor` over the bounded DataFrame `df` as one batch: the next version of
    the state after the last committed one (or the first), its outputs under
    `output/NAME/batch_id=VERSION/`. The watermark after it is the input's latest event
    time minus `lateness`; the timers below it fire.

    Args:
        df: A bounded DataFrame with the processor's key column (and event time column).
        processor: The processor.
        output: Where the outputs go: a local path (its `_state` holds `state="files"`) or
            an `s3://` URI.
        state: `files` (under `output/_state`), `files:PATH`, or a server URI.
        partitions: State partitions (fixed by the first run).
        lateness: As for `stream`.
        job: The job's name in the state store.
        output_format: `parquet` or `delta` (needed by outputs replaced by key).
        on_batch: Called with the batch's one-line summary.

    Returns:
        The batch record: `version`, `watermark`, `batch` counts (the processor's under
        `counters`), `totals`.

    Raises:
        ProcessorError, ConfigError, OutputOwned, LeaseHeld, StateError: as for `stream`.

    Example:
        >>> from sessionize import stateful
        >>> record = stateful.run(orders, Totals(), output="out/", state="files")  # doctest: +SKIP
    """
    d = declared(processor)
    engine_for(state).check_runs_processors(state)
    if df.isStreaming:
        raise ConfigError("stateful.run needs a bounded DataFrame; use stateful.stream")
    _check_columns(df, d.key, d.event_time)
    check_output(output, output_format)
    store_uri = _absolute(state_uri(state, child(output, "_state")))
    settings = _settings(df, processor, store_uri, output, partitions, lateness, job, output_format)
    owner = run_owner(job, recorded_state(state), d.name)
    check_run(output, owner, lambda: bool(settings.open_state().job_versions(job)))
    lease = output_lease(output)
    lease.acquire()
    try:
        engine = _engine(df, settings, lease)
        versions = engine.backend.job_versions(job)
        last = max(versions) if versions else None
        if last is not None:
            recorded = processor_record(engine.backend.recorded_settings(job))
            now = settings_record(settings)
            changed = [k for k in now if k in recorded and recorded[k] != now[k]]
            if changed:
                diffs = "; ".join(f"{k} {recorded[k]!r} (now {now[k]!r})" for k in changed)
                raise ConfigError(
                    f"state {redact_uri(state)} of job '{job}' was written with {diffs}: run it "
                    "with "
                    "what it was written with, or give a new state or job"
                )
        version = 0 if last is None else last + 1
        request = BatchRequest(version, -1 if last is None else last, first=last is None)
        runner = BatchRunner(engine, on_batch or _LOG.info, lease=lease,
                             claim=OwnerClaim(output, owner))  # fmt: skip
        try:
            return runner.run(df, request)
        finally:
            engine.sink.close()
    finally:
        lease.release()


def _check_columns(df: DataFrame, key: str, event_time: str | None) -> None:
    for column in [key] + ([event_time] if event_time else []):
        if column not in df.columns:
            raise ConfigError(
                f"the input has no column '{column}' (its columns: {', '.join(df.columns)})"
            )


def _absolute(uri: str) -> str:
    """What the tasks open: relative paths would resolve in each executor's directory."""
    if uri.startswith("files:"):
        return "files:" + absolute_local(uri.removeprefix("files:"))
    return uri


def _settings(df, processor, store_uri, output, partitions, lateness, job,
              output_format) -> KeyedSettings:  # fmt: skip
    d = declared(processor)
    if INVALID_OUTPUT in d.outputs or d.late_output == INVALID_OUTPUT:
        raise ConfigError(
            f"processor {processor.name}: output '{INVALID_OUTPUT}' holds the input's "
            "invalid rows; give the processor's output another name"
        )
    for name, out in d.outputs.items():
        if out.mode == "replace" and not capabilities(output, output_format).replaces_by_key:
            raise ConfigError(
                f"processor {processor.name}: output '{name}' is replaced by key, which "
                f"{kind_of(output, output_format)} outputs cannot do; write the job with "
                "output_format='delta' or to a postgresql://, kafka:// or iceberg:// output"
            )
        if out.partition_by:
            raise ConfigError(
                f"processor {processor.name}: output '{name}' is partitioned, which the "
                "engine's outputs do not do yet; declare it without partition_by"
            )
    if not isinstance(partitions, int) or partitions < 1:
        raise ConfigError(f"partitions must be a positive integer, not {partitions!r}")
    return KeyedSettings(
        processor=processor, input_schema=_arrow_schema(df), partitions=partitions,
        state_uri=store_uri, job=job, output=absolute_local(output),
        lateness_us=duration_us(lateness, "lateness"), output_format=output_format,
    )  # fmt: skip


def _engine(df: DataFrame, settings: KeyedSettings, lease: Lease) -> KeyedEngine:
    return engine_for(settings.state_uri).keyed_engine(df.sparkSession, settings, lease)


def _arrow_schema(df: DataFrame) -> pa.Schema:
    """The input's columns as the partition tasks receive them (timestamps in the session's
    time zone)."""
    zone = df.sparkSession.conf.get("spark.sql.session.timeZone") or "UTC"
    return without_marks(arrow_schema(df.schema, zone))
