"""Output format and URI -> sink."""

from __future__ import annotations

from sessionize.errors import ConfigError
from sessionize.mapping import EventMapping
from sessionize.sinks.base import Sink
from sessionize.sinks.delta import DeltaSink
from sessionize.sinks.parquet import ParquetSink
from sessionize.sinks.parquet_s3 import ManifestParquetSink

FORMATS = ("parquet", "delta")


def open_sink(
    output: str, fmt: str = "parquet", *, job: str = "sessionize",
    mapping: EventMapping | None = None,
) -> Sink:  # fmt: skip
    """The sink for `--output` and `--output-format`; `job` names the writer in Delta logs,
    `mapping` decides the outputs' columns (Delta tables are created with them)."""
    if fmt == "delta":
        if "://" in output and not output.startswith(("s3://", "file://")):
            raise ConfigError(f"Delta outputs go to a local path or an s3:// URI, not {output}")

        return DeltaSink(output, job, mapping)
    if fmt != "parquet":
        raise ConfigError(f"unknown output format {fmt!r}: use one of {', '.join(FORMATS)}")
    if output.startswith("s3://"):
        return ManifestParquetSink(output)
    return ParquetSink(output)
