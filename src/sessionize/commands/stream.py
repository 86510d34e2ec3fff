"""`sessionize stream`: a Structured Streaming query, one engine run per micro-batch."""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from dataclasses import dataclass, field

from pyspark.sql import SparkSession

from sessionize.commands.options import (
    engine_settings,
    files_state_uri,
    progress_path,
    recorded_state,
)
from sessionize.config import SessionRules, format_duration, parse_duration, redact_uri
from sessionize.engines.checkpoint import (
    batch_input,
    batch_timestamp_us,
    check_or_record,
    checkpoint_lease,
    last_committed_batch,
    record_paths,
)
from sessionize.engines.progress import ProgressLog
from sessionize.engines.runner import BatchRunner, Engine, run_query
from sessionize.engines.spark_state import PROVIDERS, SparkStateEngine
from sessionize.engines.store import StoreEngine
from sessionize.errors import ConfigError, StateError
from sessionize.sinks.registry import open_sink
from sessionize.sources.registry import check_input, open_stream
from sessionize.spark_session import get_spark
from sessionize.state import StateBackend, open_backend
from sessionize.state.lease import Lease

SPARK_STATES = tuple(PROVIDERS)


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
    progress_log: str | None = None  # default: CHECKPOINT/progress.jsonl
    output_format: str = "parquet"  # parquet | delta
    # Not recorded in the checkpoint: a rule on input, not part of the state.
    max_future_us: int | None = 86_400_000_000
    master: str | None = None  # Spark master; default local[*] (or spark-submit's)
    spark_conf: dict[str, str] = field(default_factory=dict)

    def state_uri(self) -> str:
        """`files` keeps the store under the checkpoint; `files:PATH` puts it elsewhere."""
        return files_state_uri(self.state, f"{self.checkpoint.rstrip('/')}/state")

    def input_options(self) -> dict[str, str]:
        options = dict(self.source_options)
        if self.max_files_per_trigger:
            options["maxFilesPerTrigger"] = str(self.max_files_per_trigger)
        return options

    def recorded_settings(self) -> dict[str, object]:
        """What the checkpoint is bound to (see engines.checkpoint)."""
        return {
            "state": recorded_state(self.state, f"{self.checkpoint.rstrip('/')}/state"),
            "gap": format_duration(self.rules.gap_us),
            "lateness": format_duration(self.rules.lateness_us),
            "close_actions": ",".join(self.rules.close_actions),
            "partitions": self.partitions,
            "job": self.job,
            "output_format": self.output_format,
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


def run_stream(
    opts: StreamOptions,
    spark: SparkSession | None = None,
    on_batch: Callable[[str], None] = print,
) -> list[dict]:
    """Run the query until the trigger ends it; returns the batch records of this run.

    Everything that can be checked without Spark (input, trigger, checkpoint settings, the
    state backend and its agreement with the checkpoint) is checked before Spark starts.
    """
    check_input(opts.input)
    trigger = parse_trigger(opts.trigger)
    with checkpoint_lease(opts.checkpoint) as lease:
        return _run(opts, spark, on_batch, trigger, lease)


def _run(
    opts: StreamOptions,
    spark: SparkSession | None,
    on_batch: Callable[[str], None],
    trigger: dict[str, object],
    lease: Lease,
) -> list[dict]:
    check_or_record(opts.checkpoint, opts.recorded_settings())
    paths = {"input": redact_uri(opts.input), "output": redact_uri(opts.output)}
    record_paths(opts.checkpoint, paths)
    backend = None
    if opts.state not in SPARK_STATES:
        backend = open_backend(opts.state_uri())
        backend.check()
        _check_agreement(backend, opts)
    spark = spark or get_spark(
        f"sessionize-{opts.job}",
        master=opts.master,
        conf=opts.spark_conf,
        shuffle_partitions=opts.partitions,
    )
    engine: Engine
    if backend is None:
        engine = SparkStateEngine(
            opts.state, opts.rules, opts.partitions, opts.checkpoint,
            open_sink(opts.output, opts.output_format, job=opts.job), opts.max_future_us,
        )  # fmt: skip
    else:
        engine = StoreEngine(spark, engine_settings(opts), backend)
    log = progress_path(opts.progress_log, opts.checkpoint, "progress.jsonl")
    runner = BatchRunner(
        engine,
        on_batch,
        progress=ProgressLog(log) if log else None,
        describe_input=functools.partial(batch_input, opts.checkpoint),
        batch_time=functools.partial(batch_timestamp_us, opts.checkpoint),
        lease=lease,
    )
    raw = open_stream(spark, opts.input, opts.input_options())
    return run_query(
        spark, runner, raw, name=f"sessionize-{opts.job}", checkpoint=opts.checkpoint,
        trigger=trigger,
    )  # fmt: skip


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
