"""`sessionize stream`: the source of `--input` handed to the Python API's Sessionizer.

The command adds to the API only what a command line needs: the source (files, Kafka,
Kinesis) opened from a URI, the SparkSession it starts itself (`--master`, `--conf`), and a
wait for the query's end. Everything a run guarantees is the API's (api/sessionizer.py).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace

from pyspark.sql import DataFrame, SparkSession

from sessionize.api.arguments import parse_trigger
from sessionize.api.sessionizer import Sessionizer
from sessionize.commands.options import job_spark, sessionizer, state_uri
from sessionize.commands.placement import warn_local_paths
from sessionize.config import SessionRules, counted
from sessionize.fs import child
from sessionize.mapping import EventMapping, new_mapping
from sessionize.sources.files import outside_hour_folders
from sessionize.sources.registry import check_input, open_stream, scheme_of

__all__ = ["StreamOptions", "parse_trigger", "run_stream"]


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
    remote: str | None = None  # Spark Connect server (sc://HOST:PORT) instead of a master
    spark_conf: dict[str, str] = field(default_factory=dict)
    mapping: EventMapping = field(default_factory=new_mapping)  # fields, --input-format
    metrics_port: int | None = None  # Prometheus metrics of this process (engines/metrics.py)
    metrics_host: str = "127.0.0.1"  # the address they listen on
    open_sessions: bool = False  # also the `open_sessions` output, replaced by user
    compact_every: int | None = None  # compact local Parquet outputs every N batches
    # The recorded settings the user gave (flag names, as `api.sessionizer.RECORDED`); the
    # others take the checkpoint's values. None: all were given.
    explicit: frozenset[str] | None = None

    def state_uri(self) -> str:
        """`files` keeps the store under the checkpoint; `files:PATH` puts it elsewhere."""
        return state_uri(self.state, child(self.checkpoint, "state"))

    def recorded_settings(self) -> dict[str, object]:
        """What the checkpoint is bound to, as the start records it (engines.checkpoint)."""
        return self.sessionizer().recorded_settings(self.output_format)

    def input_options(self) -> dict[str, str]:
        options = dict(self.source_options)
        if self.max_files_per_trigger:
            options["maxFilesPerTrigger"] = str(self.max_files_per_trigger)
        return options

    def sessionizer(self) -> Sessionizer:
        return sessionizer(self)


def run_stream(
    opts: StreamOptions,
    spark: SparkSession | None = None,
    on_batch: Callable[[str], None] = print,
) -> list[dict]:
    """Run the query until the trigger ends it; returns the batch records of this run.

    Everything that can be checked without Spark (input, trigger, checkpoint settings, the
    state backend and its agreement with the checkpoint) is checked before Spark starts.
    """
    check_input(opts.input, opts.mapping, opts.input_options())
    if scheme_of(opts.input) == "files":
        outside = outside_hour_folders(opts.input)
        if outside:  # a tree laid out by hour is listed through its hour folders
            on_batch(
                f"note: {counted(len(outside), 'file')} of {opts.input} outside its "
                f"hour folders (event_date=D/event_hour=H/) are not read, e.g. "
                f"{outside[0]}"
            )
    # The settings left out take the checkpoint's values before Spark starts with them.
    sessionizer, output_format = opts.sessionizer().with_checkpoint(
        opts.checkpoint, None if _left_out(opts, "output_format") else opts.output_format
    )
    opts = replace(opts, partitions=sessionizer.partitions, state=sessionizer.state)

    def events() -> DataFrame:
        session = spark or job_spark(opts, f"sessionize-{opts.job}")
        warn_local_paths(session, opts.output, opts.state_uri())
        return open_stream(session, opts.input, opts.input_options(), opts.mapping)

    run = sessionizer.start(
        events,
        output=opts.output,
        checkpoint=opts.checkpoint,
        trigger=opts.trigger,
        output_format=output_format,
        progress_log=opts.progress_log,
        on_batch=on_batch,
        input_name=opts.input,
        metrics_port=opts.metrics_port,
        metrics_host=opts.metrics_host,
        source_options=opts.input_options(),
        open_sessions=opts.open_sessions,
        compact_every=opts.compact_every,
    )
    return run.wait()


def _left_out(opts: StreamOptions, name: str) -> bool:
    return opts.explicit is not None and name not in opts.explicit
