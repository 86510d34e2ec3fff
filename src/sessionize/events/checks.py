"""The rule table's checks as Spark column expressions, shared by Spark's exact parse of JSON
lines (`parsing`) and the typed columns of DataFrames and Parquet files (`columns`): the
valid years of a time, a lone surrogate escaped in a line, a `--gap-field` value, an event
time too far ahead of the batch's (docs/design.md, "Events")."""

from __future__ import annotations

from pyspark.sql import Column
from pyspark.sql import functions as F

from sessionize.config import MAX_EVENT_GAP_US
from sessionize.events import rules as R
from sessionize.spark_casts import try_cast

# A `\\uXXXX` escape of a JSON string (after an even run of backslashes): a surrogate pair,
# then any surrogate left once the pairs are gone (Java's regular expressions).
_ESCAPE = r"(?<!\\)((?:\\\\)*)\\u"
_SURROGATE_PAIR = _ESCAPE + r"[dD][89abAB][0-9a-fA-F]{2}\\u[dD][c-fC-F][0-9a-fA-F]{2}"
_SURROGATE = _ESCAPE + r"[dD][89a-fA-F][0-9a-fA-F]{2}"


def lone_surrogate(line: Column) -> Column:
    """Whether a JSON line escapes a lone surrogate (`\\ud800`), which Spark would store as
    `?` and no UTF-8 text can hold."""
    unpaired = F.regexp_replace(line, _SURROGATE_PAIR, "$1").rlike(_SURROGATE)
    return line.contains("\\u") & unpaired


def out_of_range(ts: Column) -> Column:
    """Whether a timestamp lies outside the valid years (`rules.TIME_YEARS`)."""
    us = F.unix_micros(ts)
    return (us < F.lit(R.MIN_US)) | (us > F.lit(R.MAX_US))


def gap_us(seconds: Column) -> Column:
    """A `--gap-field` value (seconds, a double) -> microseconds as decimal digits."""
    # a TRY cast: a gap beyond 64 bits of µs is invalid (`bad_gap`), never a failed job
    return try_cast(F.round(seconds * F.lit(1e6)), "long").cast("string")


def bad_gap(seconds: Column) -> Column:
    """Whether a present gap is not one: NaN, zero or less once rounded to the µs, or
    above 30 days (a NULL gap is not bad: it means `--gap`)."""
    us = F.round(seconds * F.lit(1e6))
    outside = (us <= 0) | (us > F.lit(float(MAX_EVENT_GAP_US)))
    return seconds.isNotNull() & (F.isnan(seconds) | outside)


def too_far_ahead(ts: Column, now: Column, max_future_us: int) -> Column:
    """`ts > now + max_future`, written as `ts - interval(now + max_future) > epoch`.

    `now` changes with every micro-batch and becomes a constant in Spark's generated code,
    which is then compiled anew for every batch (a fixed cost of about 0.2 s); an interval
    constant is passed to the code as an object instead, so the code stays the same."""
    limit_us = (F.unix_micros(now) + F.lit(max_future_us)).cast("decimal(20,0)")
    limit_s = (limit_us / F.lit(1_000_000)).cast("decimal(18,6)")  # exact: 6 decimals
    return (ts - F.make_interval(secs=limit_s)) > F.timestamp_micros(F.lit(0))
