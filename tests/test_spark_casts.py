"""`spark_casts.try_cast`: NULL where a value does not fit, on every Spark line (Column's own
method from 4.0, a TRY cast built through the JVM on 3.5) and whatever ANSI mode says."""

import math

import pytest
from pyspark.sql import functions as F

from sessionize.spark_casts import try_cast

TEXTS = ["12", "-9223372036854775808", "9223372036854775808", "1.5", "1e309", "x", None]


def _as_long(text):
    """The reference: Python's int within 64 bits, else None."""
    try:
        value = int(text)
    except (TypeError, ValueError):
        return None
    return value if -(1 << 63) <= value < (1 << 63) else None


def _as_double(text):
    try:
        return float(text)
    except (TypeError, ValueError):
        return None


@pytest.mark.parametrize("ansi", ["true", "false"])
def test_try_cast_gives_null_where_the_value_does_not_fit(spark, ansi):
    before = spark.conf.get("spark.sql.ansi.enabled")
    spark.conf.set("spark.sql.ansi.enabled", ansi)
    try:
        frame = spark.createDataFrame([(t,) for t in TEXTS], "t string")
        rows = frame.select(
            "t", try_cast(F.col("t"), "long").alias("n"), try_cast(F.col("t"), "double").alias("d")
        ).collect()
    finally:
        spark.conf.set("spark.sql.ansi.enabled", before)
    assert [(r.t, r.n) for r in rows] == [(t, _as_long(t)) for t in TEXTS]
    assert [(r.t, r.d) for r in rows] == [(t, _as_double(t)) for t in TEXTS]
    assert math.isinf(rows[4].d)  # 1e309: beyond doubles, Infinity as Python reads it
