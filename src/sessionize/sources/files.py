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
import os
from collections.abc import Iterator, Mapping

import pyarrow as pa
import pyarrow.fs as pafs
from pyspark.sql import DataFrame, SparkSession

from sessionize.errors import ConfigError
from sessionize.fs import resolve_fs
from sessionize.sources.lines import DEFAULT_CHUNK_BYTES, SPARK_SCHEMA, decode_file

# The fixed schema of Spark's binaryFile format (a stream must be given it).
_BINARY_FILE = "path string, modificationTime timestamp, length long, content binary"
OPTIONS = ("maxFilesPerTrigger",)


def _decode_task(chunk_bytes: int, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    for batch in batches:
        for path in batch.column("path").to_pylist():
            yield from decode_file(path, chunk_bytes)


def _raw(df: DataFrame, chunk_bytes: int = DEFAULT_CHUNK_BYTES) -> DataFrame:
    task = functools.partial(_decode_task, chunk_bytes)
    return df.select("path").mapInArrow(task, SPARK_SCHEMA)


def check_input(path: str) -> None:
    """A local --input must be an existing directory (remote trees are listed by Spark)."""
    if "://" in path and not path.startswith("file://"):
        return
    if not os.path.isdir(path.removeprefix("file://")):
        raise ConfigError(f"--input {path} is not a directory (expected the hourly tree)")


def binary_listing(spark: SparkSession, path: str, options: Mapping[str, str]) -> DataFrame:
    """The tree's files as a stream of `binaryFile` rows (content never read by Spark)."""
    check_input(path)
    reader = (
        spark.readStream.format("binaryFile")
        .schema(_BINARY_FILE)
        .option("recursiveFileLookup", "true")
    )
    return reader.options(**dict(options)).load(path)


def listed_batch(spark: SparkSession, paths: list[str]) -> DataFrame:
    """The files under `paths` as `binaryFile` rows, once (batch mode)."""
    return spark.read.format("binaryFile").option("recursiveFileLookup", "true").load(paths)


def file_stream(spark: SparkSession, path: str, options: Mapping[str, str]) -> DataFrame:
    """The tree's lines as a stream; option `maxFilesPerTrigger` caps files per batch."""
    unknown = sorted(set(options) - set(OPTIONS))
    if unknown:
        raise ConfigError(f"file input options {unknown} unknown; accepted: {', '.join(OPTIONS)}")
    return _raw(binary_listing(spark, path, options))


def file_batch(spark: SparkSession, paths: list[str]) -> DataFrame:
    """The same records from a fixed list of files or directories (batch mode)."""
    return _raw(listed_batch(spark, paths))


def unread_files(path: str, seen: set[str]) -> dict[str, int]:
    """Files of the tree the query has not read yet (Spark's rule: no `_`/`.` names)."""
    fs, root = resolve_fs(path)
    count = size = 0
    for info in fs.get_file_info(pafs.FileSelector(root, recursive=True, allow_not_found=True)):
        if info.type != pafs.FileType.File:
            continue
        relative = info.path[len(root):].strip("/").split("/")
        if any(part.startswith(("_", ".")) for part in relative):
            continue
        if f"file://{info.path}" not in seen and info.path not in seen:
            count += 1
            size += info.size or 0
    return {"files": count, "bytes": size}
