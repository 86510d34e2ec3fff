"""`stateful.stream`, `stateful.start` and `stateful.run`: any `stateful.Processor` on the
`store` engine, with the session jobs' guarantees (exactly-once outputs, the checkpoint's
lease and the store's fence, the progress log, the checkpoint's settings check). A stream
starts through the launcher every job starts through (api/launcher.py), so it has every
capability a session stream has (Spark Connect progress, `metrics_port`, compaction, the
record cap of a continuous trigger); engines/keyed.py runs the batches."""

from __future__ import annotations

import logging
from collections.abc import Callable

from pyspark.sql import DataFrame
from pyspark.sql.streaming import StreamingQuery

from sessionize.api import launcher
from sessionize.api.keyed_source import source
from sessionize.api.processor_settings import ProcessorSettings
from sessionize.api.query import StreamRun
from sessionize.api.recorded import recorded_state
from sessionize.api.stream_jobs import ProcessorStream
from sessionize.core.processor import Processor
from sessionize.durations import Duration
from sessionize.engines.checkpoint import (
    Checkpoint,
    output_lease,
    processor_record,
    settings_differences,
)
from sessionize.engines.choice import engine_for
from sessionize.engines.keyed import settings_record
from sessionize.engines.ownership import check_run, run_owner
from sessionize.engines.runner import BatchRequest, BatchRunner
from sessionize.errors import ConfigError
from sessionize.fs import child
from sessionize.redaction import redact_uri
from sessionize.sinks.claim import OwnerClaim
from sessionize.sinks.registry import check_output

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
    metrics_port: int | None = None,
    metrics_host: str = "127.0.0.1",
    compact_every: int | None = None,
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
    settings = ProcessorSettings(processor, state, partitions, lateness, job)
    places = launcher.StreamPlaces(
        output=output,
        checkpoint=Checkpoint.at(checkpoint),
        trigger=trigger,
        output_format=output_format,
        progress_log=progress_log,
        on_batch=on_batch,
        metrics_port=metrics_port,
        metrics_host=metrics_host,
        compact_every=compact_every,
    )
    return launcher.start(ProcessorStream(df, settings), places)


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
    metrics_port: int | None = None,
    metrics_host: str = "127.0.0.1",
    compact_every: int | None = None,
) -> StreamingQuery:
    """Run `processor` over the streaming DataFrame `df`, exactly once; returns its query.

    Every micro-batch is one version of the state: the rows are shuffled by the
    processor's key into `partitions` partitions, each partition's keys go through
    `processor.process` once (core/step.py), and every output is written exactly once,
    whatever crashes and restarts. A restart with the same checkpoint resumes after its
    last committed batch; a restart with another processor, key, state schema,
    `params()`, partition count, lateness or output is refused in one line naming the
    difference. The checkpoint's lease is held while the query runs, and the store is
    fenced against the drivers before it.

    Args:
        df: A streaming DataFrame with the processor's key column (and event time column).
        processor: The processor.
        output: Where the outputs go: a local path or an `s3://` URI (Parquet or Delta
            tables), PostgreSQL tables (`postgresql://USER@HOST/DB?schema=S`), Kafka
            topics (`kafka://HOST:PORT/PREFIX`) or Iceberg tables
            (`iceberg://NAMESPACE?uri=CATALOG&warehouse=WAREHOUSE`): a table or a topic
            per declared output, keyed by the processor's key.
        checkpoint: Spark's checkpoint of the query, plus the settings it is bound to and,
            with `state="files"`, the state.
        state: `files` (under the checkpoint), `files:PATH`, or a server URI
            (`postgresql://...`, `redis://...`, `dynamodb://...`).
        partitions: State partitions (part of the state: fixed at the first start).
        lateness: How far behind the latest event time the watermark stays ("10m", a
            timedelta or microseconds); ignored without `event_time`.
        trigger: `available-now` or `processing-time=30s`.
        job: The job's name in the state store (several jobs may share one store).
        output_format: `parquet` or `delta` for a path or s3:// (an output replaced by key
            needs Delta there).
        progress_log: Where the JSON line of each batch goes (default
            `CHECKPOINT/progress.jsonl`).
        on_batch: Called with each batch's one-line summary (default: the `sessionize`
            logger).
        metrics_port: Serve Prometheus metrics on this port while the query runs (extra
            `metrics`; 0: any free port).
        metrics_host: The address the metrics listen on.
        compact_every: Local Parquet outputs: compact the published batches after every
            N-th batch.

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
        df,
        processor,
        output=output,
        checkpoint=checkpoint,
        state=state,
        partitions=partitions,
        lateness=lateness,
        trigger=trigger,
        job=job,
        output_format=output_format,
        progress_log=progress_log,
        on_batch=on_batch,
        metrics_port=metrics_port,
        metrics_host=metrics_host,
        compact_every=compact_every,
    ).query


def _handoff(settings: ProcessorSettings, output: str) -> str:
    """Where `run` hands a follow-on its rows: a folder of a file output ("" without one)."""
    d = settings.declared
    if d.follow_on is None:
        return ""
    if "://" in output and not output.startswith(("s3://", "file://")):
        raise ConfigError(
            f"processor {d.name} has a follow_on, whose rows stateful.run hands over in files "
            f"under its output: give a path or s3:// output, or run it with stateful.stream"
        )
    return child(output, "_handoff")


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
    the state after the last committed one (or the first), its outputs as batch VERSION.
    The watermark after it is the input's latest event time minus `lateness`; the timers
    below it fire.

    Args:
        df: A bounded DataFrame with the processor's key column (and event time column).
        processor: The processor.
        output: Where the outputs go: a local path (its `_state` holds `state="files"`),
            an `s3://` URI, or PostgreSQL, Kafka (with `?staging=DIR`) or Iceberg as for
            `stream`.
        state: `files` (under `output/_state`), `files:PATH`, or a server URI.
        partitions: State partitions (fixed by the first run).
        lateness: As for `stream`.
        job: The job's name in the state store.
        output_format: As for `stream`.
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
    settings = ProcessorSettings(processor, state, partitions, lateness, job)
    engine_for(state).check_runs_processors(state)
    if df.isStreaming:
        raise ConfigError("stateful.run needs a bounded DataFrame; use stateful.stream")
    settings.check_columns(df)
    check_output(output, output_format)
    settings.check_outputs(output, output_format)
    store_uri = settings.store_uri(child(output, "_state"))
    keyed = settings.keyed(df, store_uri, output, output_format, _handoff(settings, output))
    owner = run_owner(job, recorded_state(state), settings.declared.name)
    check_run(output, owner, lambda: bool(keyed.open_state().job_versions(job)))
    lease = output_lease(output)
    lease.acquire()
    try:
        engine = engine_for(store_uri).keyed_engine(df.sparkSession, keyed, lease)
        versions = engine.backend.job_versions(job)
        last = max(versions) if versions else None
        if last is not None:
            recorded = processor_record(engine.backend.recorded_settings(job))
            now = settings_record(keyed)
            diffs = settings_differences(recorded, now)
            if diffs:
                raise ConfigError(
                    f"state {redact_uri(state)} of job '{job}' was written with {diffs}: run it "
                    "with what it was written with, or give a new state or job"
                )
        version = 0 if last is None else last + 1
        request = BatchRequest(version, -1 if last is None else last, first=last is None)
        runner = BatchRunner(
            engine, on_batch or _LOG.info, lease=lease, claim=OwnerClaim(output, owner)
        )
        try:
            return runner.run(df, request)
        finally:
            engine.sink.close()
    finally:
        lease.release()
