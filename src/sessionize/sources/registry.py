"""Input URI scheme -> source, imported lazily (like the state store's registry).

Every source turns `--input` and its options into a streaming DataFrame of raw records
(`value`, `error`, `source`); parsing is the next stage's business. The file tree of JSON
lines is the listing of its files (`files.file_listing`): the parse's own task decodes them
(`files.decode_listed`), so the lines cross into the JVM once, parsed. A failed import of an
optional source names the extra to install.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping

from pyspark.sql import DataFrame, SparkSession

from sessionize import spark_version
from sessionize.errors import ConfigError, EnvironmentProblem
from sessionize.mapping import EventMapping
from sessionize.sources.files import check_input as check_tree
from sessionize.sources.files import unread_files
from sessionize.sources.uri import check_line_options

StreamOpener = Callable[[SparkSession, str, Mapping[str, str]], DataFrame]

# scheme -> ("module:function", extra to install or None); no scheme = the file tree.
_REGISTRY: dict[str, tuple[str, str | None]] = {
    "files": ("sessionize.sources.files:file_listing", None),
    "kafka": ("sessionize.sources.kafka:kafka_stream", "kafka"),
    "kinesis": ("sessionize.sources.kinesis:kinesis_stream", "kinesis"),
}


def scheme_of(uri: str) -> str:
    """`kafka` for `kafka://...`, `kinesis` for `kinesis://...`; anything else is files."""
    scheme, sep, _ = uri.partition("://")
    return scheme.lower() if sep and scheme.lower() in _REGISTRY else "files"


def check_line(uri: str, options: Mapping[str, str] | None = None) -> None:
    """Refuse in one line a Kafka or Kinesis input on a Spark older than its readers
    (Python streaming data sources, Spark 4.0), and its per-trigger cap on a Spark whose
    Python sources lack admission control (4.2)."""
    scheme = scheme_of(uri)
    if scheme != "files":
        spark_version.require("python_stream_sources", f"--input {scheme}://")
        check_line_options(options or {})


def stream_opener(uri: str) -> StreamOpener:
    check_line(uri)
    target, extra = _REGISTRY[scheme_of(uri)]
    module_name, _, name = target.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        if extra is None or e.name == module_name:
            raise
        raise EnvironmentProblem(
            f"--input {scheme_of(uri)}:// needs extra packages: pip install 'sessionize[{extra}]'"
            f" ({e})"
        ) from e
    return getattr(module, name)


def check_input(
    uri: str, mapping: EventMapping | None = None, options: Mapping[str, str] | None = None
) -> None:
    """What can be checked before Spark starts: a file tree must exist, and only a file
    tree can be Parquet, and a broker's input (and its `options`) needs a Spark that reads
    it."""
    check_line(uri, options)
    if scheme_of(uri) == "files":
        check_tree(uri)
    elif mapping is not None and mapping.input_format == "parquet":
        raise ConfigError(
            f"--input-format parquet reads a file tree; {scheme_of(uri)}:// records are "
            "JSON lines (use --input-format json)"
        )


def open_stream(
    spark: SparkSession,
    uri: str,
    options: Mapping[str, str],
    mapping: EventMapping | None = None,
) -> DataFrame:
    """`--input` as a streaming DataFrame: raw records (JSON lines), or with
    `mapping.input_format` `parquet` the typed rows of a Parquet tree (sources.parquet)."""
    if mapping is not None and mapping.input_format == "parquet":
        check_input(uri, mapping)
        from sessionize.sources.parquet import parquet_stream

        return parquet_stream(spark, uri, options, mapping)
    check_line(uri, options)
    return stream_opener(uri)(spark, uri, options)


def input_lag(uri: str, options: Mapping[str, str], offset: Mapping | None, seen: set[str]):
    """How far the input is ahead of what the query read: unread files of the tree, or
    per Kafka partition the records beyond `offset`, or per Kinesis shard the time behind."""
    scheme = scheme_of(uri)
    if scheme == "files":
        return {"unread": unread_files(uri, seen)}
    module = importlib.import_module(_REGISTRY[scheme][0].partition(":")[0])
    return {"lag": getattr(module, f"{scheme}_lag")(uri, options, offset)}


def batch_records(spark: SparkSession, paths: list[str], mapping: EventMapping) -> DataFrame:
    """The records of the files under `paths`, once (batch mode); none when `paths` is
    empty. JSON lines as the files' listing (`files.listed_files`, decoded by the parse's
    task), or the typed rows of a Parquet tree (`mapping.input_format`)."""
    from sessionize.sources.files import LISTED_FILE, listed_files
    from sessionize.sources.parquet import output_schema, parquet_batch

    if mapping.input_format == "parquet":
        if paths:
            return parquet_batch(spark, paths, mapping)
        from pyspark.sql.pandas.types import from_arrow_schema

        return spark.createDataFrame([], from_arrow_schema(output_schema(mapping)))
    if paths:
        return listed_files(spark, paths)
    return spark.createDataFrame([], f"{LISTED_FILE} string")
