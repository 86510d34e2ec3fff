"""`stateful.source`: our sources (the file tree, Kafka, Kinesis) as a DataFrame of a given
schema's columns, for `stateful.stream` and `stateful.run`; a record that does not fit is
kept as an invalid row with its reason (sources/typed.py), which the engine writes to the
output `invalid` (stateful/invalid.py)."""

from __future__ import annotations

import functools
from collections.abc import Mapping

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import from_arrow_schema

from sessionize.core.invalid import MARKS
from sessionize.errors import ConfigError
from sessionize.sources.files import check_input, decode_listed, is_listing, listed_files
from sessionize.sources.registry import open_stream, scheme_of
from sessionize.sources.typed import RecordDecoder, marked_schema, typed_task


def source(
    spark: SparkSession,
    input: str,
    schema: pa.Schema,
    *,
    options: Mapping[str, str] | None = None,
    bounded: bool = False,
) -> DataFrame:
    """Open one of our sources as a DataFrame of `schema`'s columns, read from JSON lines.

    The input is what `sessionize stream --input` takes: a directory tree of JSON-lines
    files (`.gz`/`.bz2` too; unreadable files become invalid rows, as for sessions),
    `kafka://HOST:PORT/TOPIC` or `kinesis://STREAM`. Every record becomes a row: with the
    typed values of `schema`'s columns, or (when it does not fit: not JSON, a field of the
    wrong type, a non-nullable field missing, not UTF-8) with nulls and three more
    columns, `_raw` (the record), `_reason` (why, in the words of
    docs/how-to/bad-input.md) and `_source` (file, or topic/partition/offset).
    `stateful.stream` and `stateful.run` write those rows to the output `invalid`, never
    to `process`.

    Args:
        spark: The Spark session.
        input: A local or `s3://` directory, `kafka://...` or `kinesis://...`.
        schema: The columns to read: int8-64, float32/64, string, bool and
            timestamp[s|ms|us] (from ISO-8601 strings; without an offset: UTC).
        options: The source's options (`maxFilesPerTrigger` for files; the Kafka and
            Kinesis options of docs/reference/inputs.md, "Kafka and Kinesis").
        bounded: Read the file tree once, as a bounded DataFrame (for `stateful.run`);
            only a file tree can be read so.

    Returns:
        A streaming DataFrame (bounded with `bounded=True`) of `schema`'s columns, then
        `_raw`, `_reason`, `_source`.

    Raises:
        ConfigError: A column of another type, a column named like the marks, a missing
            directory, unknown options, or `bounded` with Kafka or Kinesis.

    Example:
        >>> orders = stateful.source(spark, "orders/", pa.schema(
        ...     [("customer_id", pa.int64()), ("amount", pa.float64())]))  # doctest: +SKIP
        >>> stateful.stream(orders, Totals(), output="out/", checkpoint="chk/")  # doctest: +SKIP
    """
    if not isinstance(schema, pa.Schema):
        raise ConfigError("stateful.source needs a pyarrow Schema of the columns to read")
    taken = [name for name in schema.names if name in MARKS]
    if taken:
        raise ConfigError(
            f"stateful.source: column(s) {taken} are the names of the invalid rows' marks; "
            "rename them"
        )
    RecordDecoder(schema)  # refuses an unsupported column type here, on the driver
    if bounded:
        if scheme_of(input) != "files":
            raise ConfigError(
                f"bounded=True reads a file tree once; {scheme_of(input)}:// is read as a "
                "stream (use stateful.stream)"
            )
        if options:
            raise ConfigError(f"bounded=True takes no options, not {sorted(options)}")
        check_input(input)
        raw = listed_files(spark, [input])
    else:
        if scheme_of(input) == "files":
            check_input(input)
        raw = open_stream(spark, input, dict(options or {}))
    task = functools.partial(typed_task, schema, decode=decode_listed if is_listing(raw) else None)
    if not is_listing(raw):
        raw = raw.select(
            F.col("value").cast("string"),
            F.col("error").cast("string"),
            F.col("source").cast("string"),
        )
    return raw.mapInArrow(task, from_arrow_schema(marked_schema(schema)))
