"""Random event streams cut into random micro-batches, for the examples' properties."""

from __future__ import annotations

import pyarrow as pa
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

SETTINGS = settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def cuts(draw, n: int) -> list[int]:
    """Sorted cut points in 0..n: micro-batch boundaries (empty batches included)."""
    return sorted(draw(st.lists(st.integers(0, n), max_size=6)))


def batches(events: list[dict], at: list[int], schema: pa.Schema) -> list[pa.Table]:
    """`events` cut at `at` into tables of `schema`, in order."""
    bounds = [0, *at, len(events)]
    return [
        pa.Table.from_pylist(events[a:b], schema=schema)
        for a, b in zip(bounds, bounds[1:], strict=False)
    ]


def times_of(batch: pa.Table, column: str = "event_time") -> list[int]:
    return batch.column(column).cast(pa.int64()).to_pylist()
