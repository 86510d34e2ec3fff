"""A processor's job as `stateful.stream`, `start` and `run` are given it: the processor and
the settings that are part of its state, checked, and the engine's settings they make."""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa
from pyspark.sql import DataFrame

from sessionize.api.arguments import state_uri
from sessionize.core.declared import Declared, declared
from sessionize.core.invalid import INVALID_OUTPUT, without_marks
from sessionize.core.processor import Processor
from sessionize.durations import Duration, duration_us
from sessionize.engines.keyed import KeyedSettings
from sessionize.errors import ConfigError
from sessionize.fs import absolute_local
from sessionize.sinks.registry import capabilities, kind_of
from sessionize.spark_arrow import arrow_schema


@dataclass(frozen=True)
class ProcessorSettings:
    """The processor and what its state is bound to.

    Args:
        processor: The processor.
        state: `files` (under the checkpoint, or `run`'s output), `files:PATH`, or a
            server URI.
        partitions: State partitions (part of the state: fixed at the first start).
        lateness: How far behind the latest event time the watermark stays.
        job: The job's name in the state store.

    Raises:
        ConfigError: a partition count below 1, a lateness that is not a duration, an
            output named `invalid`.
    """

    processor: Processor
    state: str = "files"
    partitions: int = 4
    lateness: Duration = 0
    job: str = "stateful"

    def __post_init__(self) -> None:
        d = self.declared  # the declaration is checked first: ProcessorError
        if not isinstance(self.partitions, int) or self.partitions < 1:
            raise ConfigError(f"partitions must be a positive integer, not {self.partitions!r}")
        duration_us(self.lateness, "lateness")
        if INVALID_OUTPUT in d.outputs or d.late_output == INVALID_OUTPUT:
            raise ConfigError(
                f"processor {self.processor.name}: output '{INVALID_OUTPUT}' holds the input's "
                "invalid rows; give the processor's output another name"
            )

    @property
    def declared(self) -> Declared:
        return declared(self.processor)

    def check_columns(self, df: DataFrame) -> None:
        """The input has the processor's key and event time columns."""
        d = self.declared
        for column in [d.key] + ([d.event_time] if d.event_time else []):
            if column not in df.columns:
                raise ConfigError(
                    f"the input has no column '{column}' (its columns: {', '.join(df.columns)})"
                )

    def check_outputs(self, output: str, output_format: str) -> None:
        """The output can hold every declared output (one replaced by key needs a sink
        that replaces rows by key)."""
        for name, out in self.declared.outputs.items():
            if out.mode == "replace" and not capabilities(output, output_format).replaces_by_key:
                raise ConfigError(
                    f"processor {self.processor.name}: output '{name}' is replaced by key, "
                    f"which {kind_of(output, output_format)} outputs cannot do; write the job "
                    "with output_format='delta' or to a postgresql://, kafka:// or iceberg:// "
                    "output"
                )
            if out.partition_by:
                raise ConfigError(
                    f"processor {self.processor.name}: output '{name}' is partitioned, which "
                    "the engine's outputs do not do yet; declare it without partition_by"
                )

    def store_uri(self, home: str) -> str:
        """The store the tasks open: `files` at `home`, absolute (a relative path would
        resolve in each executor's own directory)."""
        uri = state_uri(self.state, home)
        if uri.startswith("files:"):
            return "files:" + absolute_local(uri.removeprefix("files:"))
        return uri

    def keyed(
        self, df: DataFrame, store_uri: str, output: str, output_format: str, handoff: str = ""
    ) -> KeyedSettings:
        """The engine's settings of this job over `df` (`handoff`: where a follow-on's rows
        go between the batch's two steps, engines/handoff.py)."""
        return KeyedSettings(
            processor=self.processor,
            input_schema=input_schema(df),
            partitions=self.partitions,
            state_uri=store_uri,
            job=self.job,
            output=absolute_local(output),
            lateness_us=duration_us(self.lateness, "lateness"),
            output_format=output_format,
            handoff=handoff,
        )


def input_schema(df: DataFrame) -> pa.Schema:
    """The input's columns as the partition tasks receive them (timestamps in the session's
    time zone)."""
    zone = df.sparkSession.conf.get("spark.sql.session.timeZone") or "UTC"
    return without_marks(arrow_schema(df.schema, zone))
