"""Typed columns -> valid events and invalid rows, as data (docs/design.md, "Events").

The counterpart of `parsing` for input that is already columns: a DataFrame handed to the
Python API, or Parquet files. The mapped fields are found by their dotted paths (a struct
field, or a top-level column whose name holds the dots). What can be judged from the
schema is judged once, before any row is read: a required field that is missing, or a
column of a type that can never hold it, is a ConfigError naming the field. What depends on
the row (a NULL, a string that is not a number or not a time, a time out of range) makes
the row invalid with a reason that names the field, as a JSON line would be.

The output has the columns of `parse`: the event's, then `reason` (NULL when valid), `raw`
(the row as JSON, invalid rows only) and `source`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from sessionize.base_schema import CHANGE_COLUMN, GAP_COLUMN
from sessionize.errors import ConfigError

# The ISO-8601 rule of JSON input, shared so that both inputs accept the same times.
from sessionize.events import rules as R
from sessionize.events.checks import bad_gap, gap_us, out_of_range, too_far_ahead
from sessionize.events.number_text import text_number
from sessionize.events.rules import ISO_8601
from sessionize.mapping import MAX_USER_KEY_BYTES, EventMapping
from sessionize.parsing import invalid_sources, now_column
from sessionize.schema import STATE_USER_KEY
from sessionize.spark_casts import try_cast

if TYPE_CHECKING:
    import pyarrow as pa

# Columns a source may add next to the event's own: never part of an event, nor of `raw`.
SIDE_COLUMNS = ("error", "source", "raw")
_INTEGRAL = (T.ByteType, T.ShortType, T.IntegerType, T.LongType)
_ATOMIC = (
    T.StringType,
    T.BooleanType,
    T.NumericType,
    T.DateType,
    T.TimestampType,
    T.TimestampNTZType,
    T.NullType,
)
# Epoch times of the valid years (`rules.TIME_YEARS`), per time format.
_EPOCH_RANGE = {
    "epoch-s": (-(-R.MIN_US // 1_000_000), R.MAX_US // 1_000_000),
    "epoch-ms": (-(-R.MIN_US // 1_000), R.MAX_US // 1_000),
}
_INTEGER_TEXT = r"^\s*-?\d{1,19}\s*$"


def resolve(schema: T.StructType, path: str) -> tuple[Column, T.DataType] | None:
    """The column at a dotted path and its type, or None. A top-level column named with
    dots (`page.current`) wins over a struct path of the same spelling."""
    parts = path.split(".")
    for i in range(len(parts), 0, -1):
        name = ".".join(parts[:i])
        if name not in schema.names:
            continue
        column, dtype = F.col(f"`{name}`"), schema[name].dataType
        for part in parts[i:]:
            if not isinstance(dtype, T.StructType) or part not in dtype.names:
                return None
            column, dtype = column.getField(part), dtype[part].dataType
        return column, dtype
    return None


def implied_user_type(schema: T.StructType, path: str) -> str | None:
    """The key type the user column's own type says: `string` for a string column, `long`
    for an integral one; None when it says nothing (no such column, or another type)."""
    found = resolve(schema, path)
    if found is None:
        return None
    if isinstance(found[1], T.StringType):
        return "string"
    return "long" if isinstance(found[1], _INTEGRAL) else None


def _required(schema: T.StructType, path: str, what: str) -> tuple[Column, T.DataType]:
    found = resolve(schema, path)
    if found is None:
        top = ", ".join(schema.names) or "none"
        raise ConfigError(
            f"the input has no column {path} (the {what} field); its columns are {top}: "
            f"map the {what} with --{what}-field / {what}=PATH"
        )
    return found


def _wrong(path: str, dtype: T.DataType, expected: str) -> ConfigError:
    return ConfigError(
        f"the input column {path} is {dtype.simpleString()}, expected {expected}: "
        "map another field or convert the column"
    )


def _user(mapping: EventMapping, column: Column, dtype: T.DataType) -> tuple[Column, Column]:
    """(value, reason) of the user key."""
    path = mapping.key_field
    missing = F.lit(R.FieldReason.MISSING.at(path))
    if isinstance(dtype, T.NullType):  # a column of NULLs only (e.g. inferred from None)
        return F.lit(None).cast("long" if mapping.user_type == "long" else "string"), missing
    if mapping.user_type == "string":
        if not isinstance(dtype, T.StringType):
            raise _wrong(path, dtype, "a string (--user-type string)")
        return column, F.when(column.isNull(), missing).when(
            column == "", F.lit(R.FieldReason.EMPTY_KEY.at(path))
        ).when(
            F.octet_length(column) > MAX_USER_KEY_BYTES,
            F.lit(R.FieldReason.LONG_KEY.at(path)),
        )
    if isinstance(dtype, _INTEGRAL):
        return column.cast("long"), F.when(column.isNull(), missing)
    if isinstance(dtype, T.DecimalType) and dtype.scale == 0:
        value = try_cast(column, "long")
        bad = F.lit(R.FieldReason.INTEGER_OUT_OF_RANGE.at(path))
        return value, F.when(column.isNull(), missing).when(value.isNull(), bad)
    if isinstance(dtype, T.StringType):
        value = F.when(column.rlike(_INTEGER_TEXT), try_cast(column, "long"))
        bad = F.lit(R.expected(path, R.INTEGER))
        return value, F.when(column.isNull(), missing).when(value.isNull(), bad)
    raise _wrong(path, dtype, "an integer (or --user-type string)")


def _time(mapping: EventMapping, column: Column, dtype: T.DataType) -> tuple[Column, Column]:
    """(timestamp, reason) of the event time, per `time_format`."""
    path, fmt = mapping.time, mapping.time_format
    missing = F.lit(R.FieldReason.MISSING.at(path))
    if isinstance(dtype, T.NullType):
        return F.lit(None).cast("timestamp"), missing
    if fmt == "iso8601":
        outside = F.lit(R.FieldReason.TIME_OUT_OF_RANGE.at(path))
        if isinstance(dtype, T.TimestampType | T.TimestampNTZType):
            ts = column.cast("timestamp")
            return ts, F.when(column.isNull(), missing).when(out_of_range(ts), outside)
        if not isinstance(dtype, T.StringType):
            raise _wrong(path, dtype, "a timestamp or an ISO-8601 string (--time-format)")
        ts = F.when(column.rlike(ISO_8601), F.try_to_timestamp(column))
        bad = F.lit(R.FieldReason.NOT_ISO_8601.at(path))
        return ts, F.when(column.isNull(), missing).when(ts.isNull(), bad).when(
            out_of_range(ts), outside
        )
    bad = F.lit(f"{path} is not an epoch time ({fmt}, years {R.TIME_YEARS})")
    if isinstance(dtype, _INTEGRAL):
        number = column.cast("long")
        low, high = _EPOCH_RANGE[fmt]
        to_ts = F.timestamp_seconds if fmt == "epoch-s" else F.timestamp_millis
        ts = F.when(number.between(low, high), to_ts(number))
        return ts, F.when(column.isNull(), missing).when(ts.isNull(), bad)
    if not isinstance(dtype, T.StringType | T.NumericType):
        raise _wrong(path, dtype, f"a number ({fmt})")
    # A fraction or a numeric string: read as JSON lines read it (events/number_text.py),
    # the fraction rounded to the microsecond.
    text = isinstance(dtype, T.StringType)
    number = text_number(column) if text else column.cast("double")
    us = F.round(number * F.lit(float(R.EPOCH_UNIT_US[fmt])))
    ts = F.when(us.between(float(R.MIN_US), float(R.MAX_US)), F.timestamp_micros(us.cast("long")))
    reason = F.when(column.isNull(), missing)
    if text:
        reason = reason.when(number.isNull(), F.lit(R.expected(path, R.NUMBER)))
    return ts, reason.when(ts.isNull(), bad)


def _string(path: str, column: Column, dtype: T.DataType) -> Column:
    if isinstance(dtype, T.StringType):
        return column
    if isinstance(dtype, _ATOMIC):
        return column.cast("string")
    raise _wrong(path, dtype, "a string")


def check_columns(schema: T.StructType, mapping: EventMapping) -> None:
    """Raise the one-line ConfigError of a missing or mistyped field, before any row."""
    _events(schema, mapping)


def _events(schema: T.StructType, mapping: EventMapping) -> tuple[list[Column], Column]:
    user, user_reason = _user(mapping, *_required(schema, mapping.key_field, "user"))
    ts, time_reason = _time(mapping, *_required(schema, mapping.time, "time"))
    page_col, page_type = _required(schema, mapping.page, "page")
    page = _string(mapping.page, page_col, page_type)
    action_found = resolve(schema, mapping.action)
    action = F.lit("view")
    if action_found is not None:
        action = F.coalesce(_string(mapping.action, *action_found), F.lit("view"))
    kept = []
    for name, path in mapping.keep:
        found = resolve(schema, path)
        value = F.lit(None).cast("string") if found is None else _string(path, *found)
        kept.append(value.alias(name))
    rule_columns, gap_reason = _rule_columns(schema, mapping)
    carried, value_reason = _carried_columns(schema, mapping, action)
    reason = F.coalesce(
        user_reason,
        time_reason,
        F.when(page.isNull(), R.FieldReason.MISSING.at(mapping.page)),
        gap_reason,
        value_reason,
    )
    # String ids are stored under a 64-bit hash of the id, as parsing.parse computes it.
    key = [F.xxhash64(user).alias(STATE_USER_KEY)] if mapping.string_keys else []
    columns = [
        user.alias("user_id"),
        ts.alias("event_time"),
        page.alias("page"),
        action.alias("action"),
        *kept,
        *rule_columns,
        *carried,
        *key,
    ]
    return columns, reason


def _carried_columns(
    schema: T.StructType, mapping: EventMapping, action: Column
) -> tuple[list[Column], Column]:
    """The `last:` kept fields, the URL, referrer and user agent (strings, read as kept
    fields are) and the conversions' values (a numeric column, as text), and why a
    conversion's value is invalid (a string column's value, on the conversion's events)."""
    columns = []
    pairs = [*mapping.read_last, *mapping.mapped_pairs]
    for name, path in pairs:
        found = resolve(schema, path)
        value = F.lit(None).cast("string") if found is None else _string(path, *found)
        columns.append(value.alias(name))
    reason = F.lit(None).cast("string")
    for c in mapping.content.conversions:
        if not c.value:
            continue
        found = resolve(schema, c.value)
        value = F.lit(None).cast("string")
        if found is not None and not isinstance(found[1], T.NullType):
            column, dtype = found
            if isinstance(dtype, T.NumericType):
                value = column.cast("double").cast("string")
            elif isinstance(dtype, T.StringType):  # numeric strings; others: invalid there
                number = F.when(column.rlike(R.NUMBER_JAVA), column)
                value = number
                bad = (action == c.action) & column.isNotNull() & number.isNull()
                reason = F.coalesce(reason, F.when(bad, F.lit(R.expected(c.value, R.NUMBER))))
            else:
                raise _wrong(c.value, dtype, "a number")
        columns.append(value.alias(c.value_column))
    return columns, reason


def _rule_columns(schema: T.StructType, mapping: EventMapping) -> tuple[list[Column], Column]:
    """The `--split-on-change` value (read as a kept field is) and the `--gap-field` value
    (a numeric column of seconds, missing: `--gap`), and why a gap is invalid."""
    columns, reason = [], F.lit(None).cast("string")
    if mapping.change_field:
        found = resolve(schema, mapping.change_field)
        value = (
            F.lit(None).cast("string") if found is None else _string(mapping.change_field, *found)
        )
        columns.append(value.alias(CHANGE_COLUMN))
    if mapping.gap:
        found = resolve(schema, mapping.gap)
        seconds = F.lit(None).cast("double")
        not_number = F.lit(None).cast("string")
        if found is not None and isinstance(found[1], T.StringType):  # numeric strings
            seconds = text_number(found[0])
            wrong = found[0].isNotNull() & seconds.isNull()
            not_number = F.when(wrong, F.lit(R.expected(mapping.gap, R.NUMBER)))
        elif found is not None and not isinstance(found[1], T.NullType):
            if not isinstance(found[1], T.NumericType):
                raise _wrong(mapping.gap, found[1], "a number of seconds")
            seconds = found[0].cast("double")
        columns.append(gap_us(seconds).alias(GAP_COLUMN))
        reason = F.coalesce(
            not_number, F.when(bad_gap(seconds), F.lit(R.FieldReason.BAD_GAP.at(mapping.gap)))
        )
    return columns, reason


def parse_columns(
    df: DataFrame,
    mapping: EventMapping,
    *,
    now: Column | int | None = None,
    max_future_us: int | None = None,
    valid_sources: bool = True,
    marks: pa.Array | None = None,  # noqa: ARG001 (the Parser contract: engines/runner.py)
) -> DataFrame:
    """Typed rows -> events with `reason`, `raw` and `source` (see the module doc).

    A source may add `error` (a reason that wins, e.g. a file that lacks a field), `source`
    (where the row came from) and `raw` (the row as the source saw it); `raw` defaults to
    the row's other columns as JSON. With `now` and `max_future_us` an event more than that
    ahead of `now` is invalid, as in `parse`; with `valid_sources` False a valid event's
    `source` is NULL. `marks` are not made here (no mark columns): the store engine makes
    them in a pass of their own (`engines/batch_marks.py`).
    """
    columns, reason = _events(df.schema, mapping)
    names = set(df.columns)
    error = F.col("error").cast("string") if "error" in names else F.lit(None).cast("string")
    source = F.col("source").cast("string") if "source" in names else F.lit(None).cast("string")
    own = [F.col(f"`{c}`") for c in df.columns if c not in SIDE_COLUMNS]
    raw = F.to_json(F.struct(*own)) if own else F.lit(None).cast("string")
    if "raw" in names:
        raw = F.coalesce(F.col("raw").cast("string"), raw)
    events = df.select(
        *columns,
        error.alias("_error"),
        source.alias("source"),
        raw.alias("_raw"),
        reason.alias("_reason"),
    )
    reason = F.coalesce(F.col("_error"), F.col("_reason"))
    now = now_column(now)
    if now is not None and max_future_us is not None:
        ahead = too_far_ahead(F.col("event_time"), now, max_future_us)
        future = F.when(ahead, F.lit(R.FieldReason.TOO_FAR_AHEAD.at(mapping.time)))
        reason = F.coalesce(reason, future)
    names_out = [c for c in events.columns if not c.startswith("_") and c != "source"]
    parsed = events.select(
        *names_out,
        reason.alias("reason"),
        F.when(reason.isNotNull(), F.col("_raw")).alias("raw"),
        "source",
    )
    return parsed if valid_sources else invalid_sources(parsed)
