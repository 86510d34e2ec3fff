"""The keyed core's public API: a `Processor` declares its key, event time, state and
outputs, and turns the state and rows of a partition's keys into an `Update`, once per
partition and micro-batch, vectorized (docs/design.md, "The keyed core").

`stream` and `run` run a processor on Spark with the state in our store (files,
PostgreSQL, Redis, DynamoDB), exactly once; `run_local` runs one over micro-batches in
memory, without Spark: for trying a processor and for its tests.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sessionize.errors import ProcessorError
from sessionize.stateful.context import Context
from sessionize.stateful.local import LocalRun, run_local
from sessionize.stateful.processor import Output, Processor
from sessionize.stateful.update import Update

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming import StreamingQuery

__all__ = [
    "Context", "LocalRun", "Output", "Processor", "ProcessorError", "Update", "run",
    "run_local", "source", "start", "stream",
]  # fmt: skip


# The core stays below Spark: these four reach the engine (sessionize.api.keyed, declared
# as the one exception in the import contracts) only when called.
def stream(df: Any, processor: Processor, **settings: Any) -> StreamingQuery:
    """Run `processor` over a streaming DataFrame on the store engine, exactly once:
    `sessionize.api.keyed.stream` documents the settings."""
    from sessionize.api.keyed import stream as _stream

    return _stream(df, processor, **settings)


def start(df: Any, processor: Processor, **settings: Any) -> Any:
    """`stream`, returning the run (`query`, `records`, `wait()`):
    `sessionize.api.keyed.start`."""
    from sessionize.api.keyed import start as _start

    return _start(df, processor, **settings)


def run(df: Any, processor: Processor, **settings: Any) -> dict:
    """Run `processor` over a bounded DataFrame as one batch, the next version of its
    state: `sessionize.api.keyed.run` documents the settings."""
    from sessionize.api.keyed import run as _run

    return _run(df, processor, **settings)


def source(spark: SparkSession, input: str, schema: pa.Schema, **settings: Any) -> DataFrame:
    """Our sources (a file tree, `kafka://`, `kinesis://`) as a DataFrame of `schema`'s
    columns, records that do not fit marked invalid with a reason:
    `sessionize.api.keyed_source.source` documents the settings."""
    from sessionize.api.keyed import source as _source

    return _source(spark, input, schema, **settings)
