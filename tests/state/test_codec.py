"""The delta codec, and a chain of decoded deltas applied in memory."""

from __future__ import annotations

import hypothesis.strategies as st
import pyarrow as pa
import pytest
from hypothesis import given, settings

from sessionize.errors import StateError
from sessionize.state import RowSpec, codec
from sessionize.state.layered import LayeredState

from .workers import content, rows

SPEC = RowSpec()
STATES = st.dictionaries(st.integers(0, 6), st.lists(st.integers(0, 9), min_size=1, max_size=3))
DELTAS = st.lists(st.tuples(STATES, st.lists(st.integers(0, 6), max_size=3)), max_size=5)


@given(base=STATES, deltas=DELTAS)
@settings(max_examples=60, deadline=None)
def test_deltas_round_trip_and_apply_in_order(base, deltas):
    encoded = []
    for i, (puts, removes) in enumerate(deltas):
        removes = [k for k in set(removes) if k not in puts]  # disjoint, as transactions stage
        delta = codec.encode_delta(rows(puts, f"d{i}-"), pa.array(removes, pa.int64()), SPEC)
        decoded = codec.decode_delta(codec.from_parquet(codec.to_parquet(delta)), SPEC)
        assert content(decoded[0]) == content(rows(puts, f"d{i}-"))
        assert sorted(decoded[1].to_pylist()) == sorted(removes)
        encoded.append(decoded)
    # the model: key -> (page prefix, expiries) of the newest delta that put it
    model = {k: ("p", es) for k, es in base.items()}
    state = LayeredState.of(rows(base), SPEC)
    for i, ((puts, _), (put_rows, removed)) in enumerate(zip(deltas, encoded, strict=True)):
        model = {k: v for k, v in model.items() if k not in removed.to_pylist()}
        model |= {k: (f"d{i}-", es) for k, es in puts.items()}
        state = state.apply(put_rows, removed, settle=False)
    want = {k: [(f"{page}{n}", e) for n, e in enumerate(es)] for k, (page, es) in model.items()}
    assert content(state.read(pa.array(range(7)).to_numpy())) == want
    assert content(state.fold().base.table) == want


def test_a_delta_of_another_schema_is_a_state_error():
    delta = codec.encode_delta(rows({1: [1]}), pa.array([2], pa.int64()), SPEC)
    other_layout = [
        delta.append_column("campaign", pa.array([None, None], pa.string())),  # one more field
        delta.drop_columns(["site"]),  # one field less
        delta.rename_columns([n if n != "page" else "url" for n in delta.column_names]),
        delta.drop_columns([codec.REMOVED]),  # a snapshot, not a delta
    ]
    for table in other_layout:
        with pytest.raises(StateError, match="does not match the state schema"):
            codec.decode_delta(codec.from_parquet(codec.to_parquet(table)), SPEC)
