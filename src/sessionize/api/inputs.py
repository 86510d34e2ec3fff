"""What a DataFrame of events holds, and the parser that reads it.

Two shapes are accepted: typed columns at the mapped paths (a struct field or a dotted
top-level name; `columns.parse_columns`), or a `value` column of JSON lines, string or
bytes (`parsing.parse`), as from Spark's Kafka source or `spark.readStream.text`. A
DataFrame with a `value` column and no column at the user path is read as JSON. The file
source's listing of JSON-lines files (`sources.files.file_listing`) is read as JSON too,
the parse's task decoding the files (`sources.files.decode_listed`).
"""

from __future__ import annotations

import dataclasses
import functools

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from sessionize.api.sessionizer_settings import SessionizerSettings
from sessionize.columns import check_columns, implied_user_type, parse_columns, resolve
from sessionize.engines.runner import Parser
from sessionize.errors import ConfigError
from sessionize.mapping import EventMapping
from sessionize.parsing import parse
from sessionize.sources.files import decode_listed, is_listing

_JSON_RECORD = ("value", "error", "source")


def is_json(df: DataFrame, mapping: EventMapping) -> bool:
    """Whether `df` carries JSON lines in `value` (or is a listing of JSON-lines files)
    rather than typed columns."""
    if is_listing(df):
        return True
    if "value" not in df.columns or resolve(df.schema, mapping.key_field) is not None:
        return False
    return isinstance(df.schema["value"].dataType, T.StringType | T.BinaryType)


def user_type_of(df: DataFrame, mapping: EventMapping) -> str | None:
    """The user key type `df` implies: a string user column gives `string` keys, an integral
    one `long` keys; None for JSON lines or a column of another type (nothing implied)."""
    if is_json(df, mapping):
        return None
    return implied_user_type(df.schema, mapping.key_field)


def json_records(df: DataFrame) -> DataFrame:
    """`df` as the raw records of `parsing.parse`: `value` as text, `error`, `source`.
    Where there is no `source`, Kafka's `topic`/`partition`/`offset` name the record."""
    names = set(df.columns)
    source = F.lit(None).cast("string")
    if "source" in names:
        source = F.col("source").cast("string")
    elif {"topic", "partition", "offset"} <= names:
        source = F.concat_ws("/", F.concat(F.lit("kafka:"), "topic"), "partition", "offset")
    error = F.col("error").cast("string") if "error" in names else F.lit(None).cast("string")
    return df.select(
        F.col("value").cast("string").alias("value"), error.alias("error"), source.alias("source")
    )


def json_parser(mapping: EventMapping, listing: bool = False) -> Parser:
    """The parser of JSON lines at the mapping's paths; with `listing`, of a listing of
    JSON-lines files, which its task decodes."""
    if listing:
        return functools.partial(parse, mapping=mapping, decode=decode_listed)
    return functools.partial(parse, mapping=mapping)


def reader(df: DataFrame, mapping: EventMapping) -> tuple[DataFrame, Parser]:
    """(records, parser) for `df`; a typed DataFrame without a required field, or with one
    of a type that cannot hold it, raises the ConfigError that names it."""
    if is_listing(df):
        return df, json_parser(mapping, listing=True)
    if is_json(df, mapping):
        records = df if df.columns == list(_JSON_RECORD) else json_records(df)
        return records, json_parser(mapping)
    check_columns(df.schema, mapping)
    return df, functools.partial(parse_columns, mapping=mapping)


def file_parser(mapping: EventMapping) -> Parser:
    """The parser of the file sources' batch records (`sources.registry.batch_records`):
    a listing of JSON-lines files (`sources.files`), or with `input_format` parquet the
    typed rows of `sources.parquet`."""
    if mapping.input_format == "parquet":
        return functools.partial(parse_columns, mapping=mapping)
    return json_parser(mapping, listing=True)


def settle_key_type(
    s: SessionizerSettings, df: DataFrame, recorded_type: str | None
) -> SessionizerSettings:
    """A Sessionizer's settings `s` with the user key type settled for `df`: the explicit
    one, else what the checkpoint recorded (`recorded_type`), else what the column implies.
    A column that implies another type than the recorded one is refused: the checkpoint's
    keys would silently change (or every event be invalid)."""
    if s.user_type_given:
        return s
    implied = user_type_of(df, s.mapping)
    if recorded_type and implied and implied != recorded_type:
        kind = "a string" if implied == "string" else "an integer"
        raise ConfigError(
            f"the checkpoint's users have {recorded_type} keys but the column "
            f"{s.mapping.key_field} is {kind}, which gives {implied} keys: pass "
            f"user_type='{recorded_type}' to keep the checkpoint's keys, or use a new "
            "checkpoint"
        )
    user_type = recorded_type or implied or s.mapping.user_type
    mapping = dataclasses.replace(s.mapping, user_type=user_type)
    return dataclasses.replace(s, mapping=mapping, user_type_given=True)
