"""JSON lines from a Hive-style tree `INPUT/event_date=/event_hour=/*.json[.gz]`.

The stream lists the tree recursively on every trigger, so new hours are picked up as
they land; Spark's file source records the files of each batch in the checkpoint, so a
re-executed batch reads exactly the same files. Names starting with `_` or `.` are ignored
(Spark's rule), which keeps writers' temporary files out. Spark reads files in the order of
their modification times, and files with equal times in the order it lists them: a
directory's listing order (a hash order on most file systems), but a glob's results are
sorted by path. So a tree laid out by hour is listed through the glob of its hour folders
(`INPUT/event_date=*/event_hour=*/*`, `listed_path`): files written within the same
millisecond are then read in path order, not split across batches at random.

Spark lists the files (`binaryFile` format, without its `content` column, so Spark itself
never opens them); the Python tasks read and decode each file (`lines.decode_file`), so a
file that is truncated, corrupt or unreadable becomes an `invalid_events` row naming it
instead of a task failure that would stop the stream on every restart.

Two forms of the same input: `file_stream`/`file_batch` are the decoded records (`value`,
`error`, `source`), a Python task of their own; `file_listing`/`listed_files` are the
listed files alone (one column, `LISTED_FILE`), for a parser that decodes them in its own
task with `decode_listed` (`parsing.parse` with `decode`), so that the lines never cross
into the JVM before they are parsed.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping

import pyarrow as pa
import pyarrow.fs as pafs
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from sessionize.errors import ConfigError
from sessionize.fs import listing, resolve_fs
from sessionize.sources.lines import DEFAULT_CHUNK_BYTES, SPARK_SCHEMA, decode_file

# The fixed schema of Spark's binaryFile format (a stream must be given it).
_BINARY_FILE = "path string, modificationTime timestamp, length long, content binary"
OPTIONS = ("maxFilesPerTrigger",)
# The one column of a listing (`file_listing`, `listed_files`): a file's path as Spark lists it.
LISTED_FILE = "listed_file"


def decode_listed(
    batches: Iterator[pa.RecordBatch], chunk_bytes: int = DEFAULT_CHUNK_BYTES
) -> Iterator[pa.RecordBatch]:
    """A task's batches of listed files (column `LISTED_FILE`) -> the lines of every file,
    in order, as RECORD_SCHEMA batches (`lines.decode_file`: it never raises).

    Example:
        >>> listed_files(spark, [root]).mapInArrow(decode_listed, SPARK_SCHEMA)
    """
    for batch in batches:
        for path in batch.column(LISTED_FILE).to_pylist():
            yield from decode_file(path, chunk_bytes)


def is_listing(df: DataFrame) -> bool:
    """Whether `df` is a listing of JSON-lines files (`file_listing`, `listed_files`)."""
    return df.columns == [LISTED_FILE]


def _listing(df: DataFrame) -> DataFrame:
    return df.select(F.col("path").alias(LISTED_FILE))


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
    return reader.options(**dict(options)).load(listed_path(path))


HOUR_FOLDERS = "event_date=*/event_hour=*/*"
_GLOB_CHARACTERS = "\\*?[]{}"


def listed_path(path: str) -> str:
    """What Spark lists of the tree `path`: the glob of its hour folders when the tree is
    laid out by hour (an `event_date=` folder at its top), so that files with equal
    modification times are read in path order; else the tree itself, recursively."""
    if not hour_tree(path):
        return path
    base, query = (path.split("?", 1) + [""])[:2]
    escaped = "".join("\\" + c if c in _GLOB_CHARACTERS else c for c in base.rstrip("/"))
    return f"{escaped}/{HOUR_FOLDERS}" + (f"?{query}" if query else "")


def hour_tree(path: str) -> bool:
    """Whether the tree `path` has an `event_date=` folder at its top."""
    try:
        fs, root = resolve_fs(path)
        return any(
            info.type == pafs.FileType.Directory and info.base_name.startswith("event_date=")
            for info in listing(fs, root)
        )
    except (OSError, ValueError):
        return False


def outside_hour_folders(path: str) -> list[str]:
    """The files of an hour-laid tree that lie outside its hour folders (directly under
    the tree or a date folder): not read, since the tree is listed through them."""
    if not hour_tree(path):
        return []
    fs, root = resolve_fs(path)
    out = []
    for info in listing(fs, root, recursive=True):
        relative = info.path[len(root) :].strip("/").split("/")
        if info.type != pafs.FileType.File or len(relative) >= 3:
            continue
        if not any(part.startswith(("_", ".")) for part in relative):
            out.append(info.path)
    return sorted(out)


def listed_batch(spark: SparkSession, paths: list[str]) -> DataFrame:
    """The files under `paths` as `binaryFile` rows, once (batch mode)."""
    return spark.read.format("binaryFile").option("recursiveFileLookup", "true").load(paths)


def file_listing(spark: SparkSession, path: str, options: Mapping[str, str]) -> DataFrame:
    """The tree's files as a stream of one column, `LISTED_FILE` (`decode_listed` reads
    them); option `maxFilesPerTrigger` caps files per batch."""
    unknown = sorted(set(options) - set(OPTIONS))
    if unknown:
        raise ConfigError(f"file input options {unknown} unknown; accepted: {', '.join(OPTIONS)}")
    return _listing(binary_listing(spark, path, options))


def listed_files(spark: SparkSession, paths: list[str]) -> DataFrame:
    """The files under `paths` as one column, `LISTED_FILE`, once (batch mode)."""
    return _listing(listed_batch(spark, paths))


def file_stream(spark: SparkSession, path: str, options: Mapping[str, str]) -> DataFrame:
    """The tree's lines as a stream of records; option `maxFilesPerTrigger` caps files per
    batch."""
    listing = file_listing(spark, path, options)
    return listing.mapInArrow(decode_listed, SPARK_SCHEMA)


def file_batch(spark: SparkSession, paths: list[str]) -> DataFrame:
    """The same records from a fixed list of files or directories (batch mode)."""
    return listed_files(spark, paths).mapInArrow(decode_listed, SPARK_SCHEMA)


def unread_files(path: str, seen: set[str]) -> dict[str, int]:
    """Files of the tree the query has not read yet (Spark's rule: no `_`/`.` names)."""
    fs, root = resolve_fs(path)
    count = size = 0
    hour_laid = hour_tree(path)
    for info in listing(fs, root, recursive=True):
        if info.type != pafs.FileType.File:
            continue
        relative = info.path[len(root) :].strip("/").split("/")
        if any(part.startswith(("_", ".")) for part in relative):
            continue
        if hour_laid and len(relative) < 3:  # outside the hour folders: never read
            continue
        if f"file://{info.path}" not in seen and info.path not in seen:
            count += 1
            size += info.size or 0
    return {"files": count, "bytes": size}
