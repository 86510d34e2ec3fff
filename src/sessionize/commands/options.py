"""What the commands share in their options."""

from __future__ import annotations

from typing import TYPE_CHECKING

from sessionize.api.arguments import progress_path, state_uri
from sessionize.api.recorded import recorded_state
from sessionize.api.sessionizer import Sessionizer
from sessionize.api.sessionizer_settings import SessionizerSettings, StoreSettings
from sessionize.engines.sessions import SessionSettings
from sessionize.spark_session import get_spark

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["engine_settings", "progress_path", "recorded_state", "state_uri"]


def engine_settings(opts) -> SessionSettings:
    """What the store engine's tasks need, from a StreamOptions or a BatchOptions: the
    settings the API's engine runs with (`Sessionizer.engine_settings`)."""
    return opts.sessionizer().engine_settings(
        opts.state_uri(), opts.output, opts.output_format, handoff=opts.handoff()
    )


def sessionizer(opts) -> Sessionizer:
    """The API's sessionizer of a StreamOptions or a BatchOptions."""
    store = StoreSettings(opts.state, opts.partitions, opts.job)
    return Sessionizer.of(
        SessionizerSettings(opts.rules, opts.mapping, store, opts.max_future_us, opts.explicit)
    )


def job_spark(opts, name: str) -> SparkSession:
    """The Spark session of a command's job called `name`, as `--master`, `--conf` and
    `--remote` say, with one shuffle partition per state partition."""
    return get_spark(
        name,
        master=opts.master,
        conf=opts.spark_conf,
        remote=opts.remote,
        shuffle_partitions=opts.partitions,
    )
