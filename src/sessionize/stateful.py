"""`sessionize.stateful`: your own keyed, stateful job with sessionize's guarantees.

The core's API (`Processor`, `Output`, `Update`, `Context`, `run_local`: sessionize.core)
and the ways to run a processor on Spark with the state in our store (files, PostgreSQL,
Redis, DynamoDB), exactly once: `stream` and `start` (a stream, through the one launcher
every job starts through: api/launcher.py), `run` (one bounded batch) and `source` (our
sources as a DataFrame of a schema). These four import PySpark when called, so that
`from sessionize import stateful` and `run_local` work without it.

    >>> from sessionize import stateful
    >>> sorted(n for n in stateful.__all__ if n.islower())
    ['run', 'run_local', 'source', 'start', 'stream']
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sessionize.core import (
    Context,
    FollowOn,
    LocalRun,
    Output,
    Processor,
    ProcessorError,
    Update,
    run_local,
)

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming.query import StreamingQuery

    from sessionize.api.query import StreamRun

__all__ = [
    "Context",
    "FollowOn",
    "LocalRun",
    "Output",
    "Processor",
    "ProcessorError",
    "Update",
    "run",
    "run_local",
    "source",
    "start",
    "stream",
]


def stream(df: DataFrame, processor: Processor, **settings: Any) -> StreamingQuery:
    """Run `processor` over a streaming DataFrame on the store engine, exactly once:
    `sessionize.api.keyed.stream` documents the settings."""
    from sessionize.api.keyed import stream as _stream

    return _stream(df, processor, **settings)


def start(df: DataFrame, processor: Processor, **settings: Any) -> StreamRun:
    """`stream`, returning the run (`query`, `records`, `wait()`):
    `sessionize.api.keyed.start`."""
    from sessionize.api.keyed import start as _start

    return _start(df, processor, **settings)


def run(df: DataFrame, processor: Processor, **settings: Any) -> dict[str, Any]:
    """Run `processor` over a bounded DataFrame as one batch, the next version of its
    state: `sessionize.api.keyed.run` documents the settings."""
    from sessionize.api.keyed import run as _run

    return _run(df, processor, **settings)


def source(spark: SparkSession, input: str, schema: pa.Schema, **settings: Any) -> DataFrame:
    """Our sources (a file tree, `kafka://`, `kinesis://`) as a DataFrame of `schema`'s
    columns, records that do not fit marked invalid with a reason:
    `sessionize.api.keyed_source.source` documents the settings."""
    from sessionize.api.keyed_source import source as _source

    return _source(spark, input, schema, **settings)
