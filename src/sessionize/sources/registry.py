"""Input URI scheme -> source, imported lazily (like the state store's registry).

Every source turns `--input` and its options into a streaming DataFrame of raw records
(`value`, `error`, `source`); parsing is the next stage's business. A failed import of an
optional source names the extra to install.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping

from pyspark.sql import DataFrame, SparkSession

from sessionize.errors import EnvironmentProblem
from sessionize.sources.files import check_input as check_tree
from sessionize.sources.files import unread_files

StreamOpener = Callable[[SparkSession, str, Mapping[str, str]], DataFrame]

# scheme -> ("module:function", extra to install or None); no scheme = the file tree.
_REGISTRY: dict[str, tuple[str, str | None]] = {
    "files": ("sessionize.sources.files:file_stream", None),
    "kafka": ("sessionize.sources.kafka:kafka_stream", "kafka"),
    "kinesis": ("sessionize.sources.kinesis:kinesis_stream", "kinesis"),
}


def scheme_of(uri: str) -> str:
    """`kafka` for `kafka://...`, `kinesis` for `kinesis://...`; anything else is files."""
    scheme, sep, _ = uri.partition("://")
    return scheme.lower() if sep and scheme.lower() in _REGISTRY else "files"


def stream_opener(uri: str) -> StreamOpener:
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


def check_input(uri: str) -> None:
    """What can be checked before Spark starts: a file tree must exist."""
    if scheme_of(uri) == "files":
        check_tree(uri)


def open_stream(spark: SparkSession, uri: str, options: Mapping[str, str]) -> DataFrame:
    """The raw records of `--input` as a streaming DataFrame."""
    return stream_opener(uri)(spark, uri, options)


def input_lag(uri: str, options: Mapping[str, str], offset: Mapping | None, seen: set[str]):
    """How far the input is ahead of what the query read: unread files of the tree, or
    per Kafka partition the records beyond `offset`, or per Kinesis shard the time behind."""
    scheme = scheme_of(uri)
    if scheme == "files":
        return {"unread": unread_files(uri, seen)}
    module = importlib.import_module(_REGISTRY[scheme][0].partition(":")[0])
    return {"lag": getattr(module, f"{scheme}_lag")(uri, options, offset)}
