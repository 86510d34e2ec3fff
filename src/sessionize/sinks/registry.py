"""Output format and URI -> sink."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.dataset as ds

from sessionize.errors import ConfigError
from sessionize.fs import child
from sessionize.mapping import EventMapping
from sessionize.sinks.base import Sink
from sessionize.sinks.delta import DeltaSink
from sessionize.sinks.parquet import ParquetSink
from sessionize.sinks.parquet_s3 import ManifestParquetSink, committed_dataset

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


def committed_rows(output: str, name: str) -> ds.Dataset | None:
    """Output `name` under `output` as its readers should see it, whatever format wrote it:
    a Delta table's current version, the committed batches of Parquet on s3:// (its commit
    files), or local Parquet's batch directories. None when the output is not there."""
    delta = DeltaSink(output, "reader").table(name)
    if delta is not None:
        return delta.to_pyarrow_dataset()
    try:
        if output.startswith("s3://"):
            data = committed_dataset(output, name)
            return data if data.files else None
        return ds.dataset(child(output, name), format="parquet", partitioning="hive")
    except (FileNotFoundError, pa.ArrowInvalid):
        return None
