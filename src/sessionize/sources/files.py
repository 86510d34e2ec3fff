"""JSON lines from a Hive-style tree `INPUT/event_date=/event_hour=/*.json[.gz]`.

The stream lists the tree recursively on every trigger, so new hours are picked up as
they land; Spark's file source records the files of each batch in the checkpoint, so a
re-executed batch reads exactly the same files. Names starting with `_` or `.` are ignored
(Spark's rule), which keeps writers' temporary files out.

Spark lists the files (`binaryFile` format, without its `content` column, so Spark itself
never opens them); the Python tasks read and decode each file (`lines.decode_file`), so a
file that is truncated, corrupt or unreadable becomes an `invalid_events` row naming it
instead of a task failure that would stop the stream on every restart.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession

from sessionize.sources.lines import DEFAULT_CHUNK_BYTES, decode_file
from sessionize.sources.uri import SPARK_SCHEMA

# The fixed schema of Spark's binaryFile format (a stream must be given it).
_BINARY_FILE = "path string, modificationTime timestamp, length long, content binary"


def _decode_task(chunk_bytes: int, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    for batch in batches:
        for path in batch.column("path").to_pylist():
            yield from decode_file(path, chunk_bytes)


def _raw(df: DataFrame, chunk_bytes: int = DEFAULT_CHUNK_BYTES) -> DataFrame:
    task = functools.partial(_decode_task, chunk_bytes)
    return df.select("path").mapInArrow(task, SPARK_SCHEMA)


def file_stream(
    spark: SparkSession, path: str, max_files_per_trigger: int | None = None
) -> DataFrame:
    reader = (
        spark.readStream.format("binaryFile")
        .schema(_BINARY_FILE)
        .option("recursiveFileLookup", "true")
    )
    if max_files_per_trigger:
        reader = reader.option("maxFilesPerTrigger", str(max_files_per_trigger))
    return _raw(reader.load(path))


def file_batch(spark: SparkSession, paths: list[str]) -> DataFrame:
    """The same records from a fixed list of files or directories (batch mode)."""
    return _raw(spark.read.format("binaryFile").option("recursiveFileLookup", "true").load(paths))
