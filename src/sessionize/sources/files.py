"""JSON lines from a Hive-style tree `INPUT/event_date=/event_hour=/*.json[.gz]`.

The stream lists the tree recursively on every trigger, so new hours are picked up as
they land; Spark's file source records the files of each batch in the checkpoint, so a
re-executed batch reads exactly the same files. Names starting with `_` or `.` are ignored
(Spark's rule), which keeps writers' temporary files out.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

import pyarrow.fs as pafs
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from sessionize.errors import ConfigError
from sessionize.fs import resolve_fs

OPTIONS = ("maxFilesPerTrigger",)


def _raw(df: DataFrame) -> DataFrame:
    return df.select(
        F.col("value"),
        F.lit(None).cast("string").alias("error"),
        F.col("_metadata.file_path").alias("source"),
    )


def check_input(path: str) -> None:
    """A local --input must be an existing directory (remote trees are listed by Spark)."""
    if "://" in path and not path.startswith("file://"):
        return
    if not os.path.isdir(path.removeprefix("file://")):
        raise ConfigError(f"--input {path} is not a directory (expected the hourly JSON tree)")


def file_stream(spark: SparkSession, path: str, options: Mapping[str, str]) -> DataFrame:
    """The tree's lines as a stream; option `maxFilesPerTrigger` caps files per batch."""
    unknown = sorted(set(options) - set(OPTIONS))
    if unknown:
        raise ConfigError(f"file input options {unknown} unknown; accepted: {', '.join(OPTIONS)}")
    check_input(path)
    reader = spark.readStream.format("text").option("recursiveFileLookup", "true")
    return _raw(reader.options(**dict(options)).load(path))


def file_batch(spark: SparkSession, paths: list[str]) -> DataFrame:
    """The same records from a fixed list of files or directories (batch mode)."""
    return _raw(spark.read.format("text").option("recursiveFileLookup", "true").load(paths))


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
