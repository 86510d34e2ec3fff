"""`parsing.parse` (the block reader plus the exact path) gives what `parsing.parse_exact`
(Spark's expressions alone) gives, row for row, on random documents, valid, almost valid
and hostile."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyspark.sql import functions as F

from sessionize.parsing import parse, parse_exact

from .test_blocks import DAY_US, DEFAULT, NOW_US, STRING_EPOCH, documents


def _rows(df) -> list[tuple]:
    """The rows, times as microseconds: Python's datetime has no year 0, which Spark reads
    (an invalid line keeps its parsed time)."""
    micros = [
        F.unix_micros(F.col(f.name)).alias(f.name)
        if f.dataType.typeName() == "timestamp"
        else F.col(f.name)
        for f in df.schema.fields
    ]
    return sorted((tuple(r) for r in df.select(micros).collect()), key=repr)


def _same(spark, lines: list[str], mapping) -> None:
    raw = spark.createDataFrame(
        [(line, None, f"s{i}") for i, line in enumerate(lines)],
        "value string, error string, source string",
    )
    now = F.timestamp_micros(F.lit(NOW_US))
    want = parse_exact(raw, now=now, max_future_us=DAY_US, mapping=mapping)
    assert _rows(parse(raw, now=NOW_US, max_future_us=DAY_US, mapping=mapping)) == _rows(want)
    assert _rows(parse(raw, now=now, max_future_us=DAY_US, mapping=mapping)) == _rows(want)


@settings(max_examples=3, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.lists(documents(DEFAULT), min_size=5, max_size=25))
def test_default_mapping_equals_sparks_parse(spark, lines):
    _same(spark, lines, DEFAULT)


@settings(max_examples=3, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.lists(documents(STRING_EPOCH), min_size=5, max_size=25))
def test_string_ids_epoch_times_and_rule_fields_equal_sparks_parse(spark, lines):
    _same(spark, lines, STRING_EPOCH)


def test_a_conversion_value_mapping_equals_sparks_parse(spark):
    """A conversion's value is read as its JSON text, which the block reader does not give:
    such a mapping is parsed by Spark's expressions alone, with the same outputs."""
    from sessionize.content import Conversion, SessionContent
    from sessionize.mapping import EventMapping

    mapping = EventMapping(
        content=SessionContent(conversions=(Conversion("purchase", "buy", "order.total"),))
    )
    head = '{"user_id": 1, "event_time": "2026-11-01T09:00:00Z", "page": {"current": "a"}'
    lines = [
        head + ', "action": "buy", "order": {"total": 12.50}}',
        head + ', "action": "buy", "order": {"total": "12"}}',
        head + ', "action": "view", "order": {"total": "n/a"}}',
        head + "}",
        "not json",
        head + ', "action": "buy", "order": {"total": "n/a"}}',
        head + ', "action": "buy", "order": {"total": "49.90"}}',
        head + ', "action": "buy", "order": {"total": true}}',
    ]
    _same(spark, lines, mapping)
    raw = spark.createDataFrame(
        [(line, None, "s") for line in lines], "value string, error string, source string"
    )
    reasons = [
        r["reason"] for r in parse(raw, now=NOW_US, max_future_us=DAY_US, mapping=mapping).collect()
    ]
    expected = "order.total: expected a number"
    assert reasons == [None, None, None, None, "not a JSON object", expected, None, expected]
