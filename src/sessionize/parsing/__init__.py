"""Raw lines -> valid events and invalid lines, as data (docs/design.md, "Events").

Lines are read into typed event columns in the Python tasks (`events.json_lines`: strict
JSON checked against the rule table, the time converted per batch); the few lines that
strict reading leaves open are decided by the exact fallback in Spark's JVM
(`parsing.jvm`), the same expressions every line went through before. Every line leaves
this stage either as a valid event or with a reason; nothing is dropped and nothing raises.

The fields, their paths and types come from an `EventMapping` (default: the sample
contract); reasons name the field by its path in the input.
"""

from __future__ import annotations

import functools

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import from_arrow_schema

from sessionize.events import json_lines, rules
from sessionize.mapping import EventMapping
from sessionize.parsing.jvm import decide_rest, event_names, fields, too_far_ahead

__all__ = [
    "EVENT_COLUMNS", "event_columns", "fields", "future_reason", "parse", "parse_in_jvm",
    "too_far_ahead",
]  # fmt: skip

# Parsed columns of the default mapping, in the order of schema.EVENT.
EVENT_COLUMNS = [n for n in event_names(None) if n != "user_key"]


def future_reason(mapping: EventMapping) -> str:
    """The reason of an event too far ahead of the batch's time, named by the time's path."""
    return rules.too_far_ahead(mapping.time)


def event_columns(mapping: EventMapping | None = None) -> list[str]:
    """The parsed event columns of `mapping`, in the order of its layout's event schema;
    with string user ids, the state key `user_key` follows."""
    return event_names(mapping)


def parse(
    raw: DataFrame,
    *,
    now: Column | int | None = None,
    max_future_us: int | None = None,
    mapping: EventMapping | None = None,
) -> DataFrame:
    """`raw(value string, error string, source string)` -> events with `reason` and `raw`.

    Output columns: `event_columns(mapping)`, then `reason` (NULL for valid events), `raw`
    (the line, kept only for invalid ones) and `source`. A source may pre-fill `error` (e.g.
    a record that is not UTF-8); that error becomes the reason. An ISO-8601 time without an
    offset is UTC.

    With `now` (µs since the epoch, or a timestamp column) and `max_future_us`, an event
    whose time is more than that ahead of `now` is invalid: `event_time too far in the
    future` (named by the mapped time field). Its `event_time` stays in the output, so
    whatever takes a watermark from the parsed rows must take it from valid rows only
    (`reason` NULL). With an integer `now`
    the reading task judges the lines it decides; with a column, Spark judges every line.

    Example:
        >>> parse(spark.read.text("events/").selectExpr("value", "null error", "null source"),
        ...       now=1_700_000_000_000_000, max_future_us=86_400_000_000)  # doctest: +SKIP
    """
    m = mapping or EventMapping()
    plan = json_lines.plan(m)
    in_task = now is None or isinstance(now, int)
    task = functools.partial(
        json_lines.parse_task, plan, now if in_task else None,
        max_future_us if in_task else None, not in_task,
    )  # fmt: skip
    typed = raw.select("value", "error", "source").mapInArrow(task, from_arrow_schema(plan.schema))
    # The lines left to the fallback are judged against the same time there.
    at = F.timestamp_micros(F.lit(now)) if isinstance(now, int) else now
    return decide_rest(typed, m, now=at, max_future_us=max_future_us)


def parse_in_jvm(
    raw: DataFrame,
    *,
    now: Column | None = None,
    max_future_us: int | None = None,
    mapping: EventMapping | None = None,
) -> DataFrame:
    """`parse` with every line decided by the exact fallback alone, as lines were read
    before the Python reading existed: the reference the tests hold `parse` to."""
    m = mapping or EventMapping()
    names = event_names(m)
    schema = from_arrow_schema(json_lines.plan(m).schema)
    nulls = [F.lit(None).cast(schema[n].dataType).alias(n) for n in names]
    typed = raw.select(
        *nulls,
        F.col("error").alias("reason"),  # a source's error is decided as it is
        F.col("value").alias("raw"),
        "source",
        F.col("error").isNotNull().alias(json_lines.EXACT),
    )
    return decide_rest(typed, m, now=now, max_future_us=max_future_us)
