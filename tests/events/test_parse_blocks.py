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
    return sorted((tuple(r) for r in df.collect()), key=repr)


def _same(spark, lines: list[str], mapping) -> None:
    raw = spark.createDataFrame(
        [(line, None, f"s{i}") for i, line in enumerate(lines)],
        "value string, error string, source string",
    )
    now = F.timestamp_micros(F.lit(NOW_US))
    want = parse_exact(raw, now=now, max_future_us=DAY_US, mapping=mapping)
    assert _rows(parse(raw, now=NOW_US, max_future_us=DAY_US, mapping=mapping)) == _rows(
        want
    )
    assert _rows(parse(raw, now=now, max_future_us=DAY_US, mapping=mapping)) == _rows(want)


@settings(max_examples=3, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.lists(documents(DEFAULT), min_size=5, max_size=25))
def test_default_mapping_equals_sparks_parse(spark, lines):
    _same(spark, lines, DEFAULT)


@settings(max_examples=3, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.lists(documents(STRING_EPOCH), min_size=5, max_size=25))
def test_string_ids_epoch_times_and_rule_fields_equal_sparks_parse(spark, lines):
    _same(spark, lines, STRING_EPOCH)
