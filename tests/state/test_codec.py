"""The delta codec and the one-pass application of a chain of deltas."""

from __future__ import annotations

import hypothesis.strategies as st
import pyarrow as pa
from hypothesis import given, settings

from sessionize.state import RowSpec, codec

from .workers import content, rows

SPEC = RowSpec()
STATES = st.dictionaries(st.integers(0, 6), st.lists(st.integers(0, 9), min_size=1, max_size=3))
DELTAS = st.lists(st.tuples(STATES, st.lists(st.integers(0, 6), max_size=3)), max_size=5)


@given(base=STATES, deltas=DELTAS)
@settings(max_examples=60, deadline=None)
def test_chain_equals_applying_each_delta(base, deltas):
    encoded = []
    for i, (puts, removes) in enumerate(deltas):
        removes = [k for k in set(removes) if k not in puts]  # disjoint, as transactions stage
        delta = codec.encode_delta(rows(puts, f"d{i}-"), pa.array(removes, pa.int64()), SPEC)
        decoded = codec.decode_delta(codec.from_parquet(codec.to_parquet(delta)), SPEC)
        assert content(decoded[0]) == content(rows(puts, f"d{i}-"))
        assert sorted(decoded[1].to_pylist()) == sorted(removes)
        encoded.append(decoded)
    one_by_one = rows(base)
    for puts, removes in encoded:
        one_by_one = codec.apply_changes(one_by_one, puts, removes, SPEC)
    assert content(codec.apply_chain(rows(base), encoded, SPEC)) == content(one_by_one)
