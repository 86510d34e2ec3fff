"""One way in: every stream, a session job's or any processor's, starts here.

The steps, in order (docs/design.md, "The launcher"): the checkpoint and the output are
places we read and write; the job's own checks that need no I/O; this process's last query
on the checkpoint cleaned up; the output's owner checked; the checkpoint's lease taken; an
unfinished rewind refused; the job's settings checked against the checkpoint's record (and
recorded); the output's lease taken; the job's id made and its claim prepared; the paths
recorded; the engine built (its state opened and agreeing with Spark's commit log, the
workers' Python checked); the batch runner and the query started (`api/query.launch`:
Spark Connect's progress tail, the record cap of a continuous trigger, `--metrics-port`,
compaction). What differs between jobs is a `StreamJob` (api/stream_jobs.py); every
capability added here reaches sessions and processors alike.
"""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Protocol

from pyspark.sql import DataFrame, SparkSession

from sessionize.api.arguments import parse_trigger, progress_path
from sessionize.api.query import StreamRun, check_compactable, end_finished, launch
from sessionize.engines.checkpoint import (
    Checkpoint,
    output_lease,
    record_paths,
    refuse_if_rewinding,
)
from sessionize.engines.metrics import stream_metrics
from sessionize.engines.ownership import StreamOwner
from sessionize.engines.runner import Engine
from sessionize.redaction import redact_uri
from sessionize.sinks.kafka import with_staging
from sessionize.sinks.registry import check_output
from sessionize.state.lease import Lease

KAFKA_STAGING = "kafka-staging"  # where tasks stage rows for a Kafka output without staging=
_LOG = logging.getLogger("sessionize")


@dataclass(frozen=True)
class StreamPlaces:
    """Where a stream reads, writes and reports, and how it runs (the arguments every
    stream takes, grouped).

    Args:
        output: Where the outputs go (sinks/registry.py: a path, s3://, postgresql://,
            kafka://, iceberg://).
        checkpoint: Spark's checkpoint of the query plus our records.
        trigger: `available-now` or `processing-time=30s`.
        output_format: `parquet` or `delta` for a file output (None: the checkpoint's,
            else parquet).
        progress_log: The JSON line of each batch (default `CHECKPOINT/progress.jsonl`).
        on_batch: Each batch's one-line summary (default: the `sessionize` logger).
        input_name: The `--input` URI (recorded), or `dataframe`.
        source_options: The input's options, to measure its lag.
        metrics_port: Serve Prometheus metrics on this port (engines/metrics.py).
        metrics_host: The address the metrics listen on.
        compact_every: Compact local Parquet outputs after every N-th batch.
    """

    output: str
    checkpoint: Checkpoint
    trigger: str = "available-now"
    output_format: str | None = None
    progress_log: str | None = None
    on_batch: Callable[[str], None] | None = None
    input_name: str = "dataframe"
    source_options: Mapping[str, str] = field(default_factory=dict)
    metrics_port: int | None = None
    metrics_host: str = "127.0.0.1"
    compact_every: int | None = None

    @property
    def say(self) -> Callable[[str], None]:
        return self.on_batch or _LOG.info


@dataclass
class Started:
    """What a job's `engine` gives the launcher: the engine and the input it runs over."""

    spark: SparkSession
    engine: Engine
    records: DataFrame


class JobNames(Protocol):
    """What names a job and its state: a Sessionizer, a processor's settings."""

    @property
    def job(self) -> str:
        """The job's name in the state store."""
        ...

    @property
    def state(self) -> str:
        """`--state` as given."""
        ...


class StreamJob(ABC):
    """What one kind of stream adds to the launcher's steps."""

    owner_kind: str  # sinks/owner.py: STREAM, STATEFUL_STREAM
    processor: str | None = None  # a processor's name, for its owner record

    @abstractmethod
    def names(self) -> JobNames:
        """The settings that name the job and its state."""

    @property
    def job(self) -> str:
        return self.names().job

    @property
    def state(self) -> str:
        return self.names().state

    def check(self, places: StreamPlaces) -> None:  # noqa: B027 - most jobs need nothing more
        """Checks that need no lease and write nothing (the engine's Spark line)."""

    def resolved(self, places: StreamPlaces) -> tuple[StreamJob, str]:
        """This job and output format with what they were not given taken from the
        checkpoint's record (a processor's job is given everything)."""
        return self, places.output_format or "parquet"

    def check_outputs(self, places: StreamPlaces, output_format: str) -> None:  # noqa: B027
        """The output can hold what the job writes (outputs replaced by key)."""

    @abstractmethod
    def record(self, places: StreamPlaces, output_format: str) -> None:
        """Check the job's settings against the checkpoint's record, recording them in a
        new checkpoint.

        Raises:
            IncompatibleCheckpoint: one line naming each difference.
        """

    def recorded_input(self, places: StreamPlaces) -> dict[str, str]:
        """What the checkpoint's paths say of the input (a processor's: nothing)."""
        return {}

    @abstractmethod
    def store_uri(self, checkpoint: Checkpoint) -> str:
        """The state store's URI (`files` under the checkpoint)."""

    @abstractmethod
    def start_engine(self, places: StreamPlaces, output_format: str, lease: Lease) -> Started:
        """Open the state (checked against Spark's commit log), build the input and the
        engine, check the workers' Python."""


def start(job: StreamJob, places: StreamPlaces) -> StreamRun:
    """Start `job` as a stream: the steps of this module's docstring.

    Returns:
        The StreamRun: `query`, the committed `records`, `wait()`.

    Raises:
        ConfigError: a setting or place is wrong, in one line.
        IncompatibleCheckpoint: the checkpoint was created with other settings.
        OutputOwned: another job owns the output.
        LeaseHeld: another driver runs on this checkpoint or writes the output.
        StateError: the state is unreachable or does not go with the checkpoint.
    """
    ck = places.checkpoint
    output = with_staging(places.output, ck.child(KAFKA_STAGING))
    places = replace(places, output=output)
    check_output(output, None)  # the place; its format once resolved, below
    trigger = parse_trigger(places.trigger)
    job.check(places)  # before anything is written
    end_finished(ck.place)
    StreamOwner(ck, job.job, job.owner_kind, job.processor).check(output)
    lease = ck.lease()
    lease.acquire()
    held: list[Callable[[], None]] = [lease.release]
    try:
        refuse_if_rewinding(ck)
        job, output_format = job.resolved(places)
        check_output(output, output_format)
        job.check_outputs(places, output_format)
        check_compactable(output, output_format, places.compact_every)
        metrics = stream_metrics(
            places.metrics_port,
            job.job,
            ck.place,
            places.input_name,
            places.source_options,
            host=places.metrics_host,
            say=places.say,
        )
        if metrics is not None:
            held.append(metrics.close)
        job.record(places, output_format)
        # The output is this checkpoint's: its lease too, so that no other driver
        # (`maintain` included) writes it while the stream runs.
        writer = output_lease(output)
        writer.acquire()
        held.append(writer.release)
        claim = StreamOwner(ck, job.job, job.owner_kind, job.processor).claim(output)
        store_uri = job.store_uri(ck)
        # What `history`, `rewind` and `status` need besides the settings (no secrets).
        record_paths(
            ck,
            {
                **job.recorded_input(places),
                "output": redact_uri(output),
                "output_format": output_format,
                "state": redact_uri(store_uri),
                "job": job.job,
                "progress_log": places.progress_log,  # None: CHECKPOINT/progress.jsonl
            },
        )
        started = job.start_engine(places, output_format, lease)
        return launch(
            started.spark,
            started.engine,
            started.records,
            job=job.job,
            checkpoint=ck.place,
            trigger=trigger,
            progress_log=progress_path(places.progress_log, ck.place, "progress.jsonl"),
            on_batch=places.say,
            lease=lease,
            metrics=metrics,
            compact_every=places.compact_every,
            claim=claim,
            output_lease=writer,
            name=f"{'stateful' if job.processor else 'sessionize'}-{job.job}",
        )
    except BaseException:
        for release in reversed(held):
            release()
        raise
