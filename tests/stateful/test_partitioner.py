"""Spark's placement of a key, computed in Arrow (`stateful.partitioner`), against Spark's
own shuffle of the same keys."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sessionize.core.partitioner import spark_partitions
from sessionize.engines.placement import user_partitions

# Texts of every length around Murmur3's 4-byte words, multi-byte UTF-8 (whose bytes are
# negative as Java's signed bytes), and longer than the hashing matrix's width. No lone
# surrogates (category Cs): no UTF-8 holds them, so no Arrow string does; Hypothesis's
# characters() with a minimal code point draws them unless told not to.
TEXTS = st.one_of(
    st.text(max_size=12),
    st.text(alphabet=st.characters(min_codepoint=0x80, exclude_categories=("Cs",)), max_size=9),
    st.text(min_size=250, max_size=300),
    st.none(),
)
LONGS = st.one_of(st.integers(-(2**63), 2**63 - 1), st.integers(-5, 5), st.none())


@pytest.mark.parametrize(
    ("values", "kind"), [(LONGS, pa.int64()), (TEXTS, pa.string())], ids=["long", "string"]
)
def test_every_key_goes_where_spark_places_it(spark, values, kind):
    @settings(max_examples=8, deadline=None, suppress_health_check=list(HealthCheck))
    @given(keys=st.lists(values, min_size=1, max_size=200), n=st.sampled_from([1, 3, 4, 200]))
    def check(keys, n):
        array = pa.array(keys, kind)
        expected = user_partitions(spark, array, n)  # Spark's own shuffle
        np.testing.assert_array_equal(spark_partitions(array, n), expected)

    check()


def test_a_key_of_another_type_is_refused():
    with pytest.raises(TypeError, match="int32"):
        spark_partitions(pa.array([1], pa.int32()), 4)
