"""The reading task's slices of decoded lines (`events.reading.bounded`): every line once,
in order, in slices Spark could have handed over."""

from __future__ import annotations

import pyarrow as pa

from sessionize.events.reading import bounded
from sessionize.spark_session import ARROW_BATCH_BYTES


def _batch(values: list[str]) -> pa.RecordBatch:
    n = len(values)
    return pa.RecordBatch.from_pydict(
        {
            "value": pa.array(values, pa.string()),
            "error": pa.nulls(n, pa.string()),
            "source": pa.array([f"s{i}" for i in range(n)], pa.string()),
        }
    )


def test_slices_keep_every_line_in_order_within_the_limits():
    short = [f"line {i}" for i in range(25_000)]
    big = "x" * (ARROW_BATCH_BYTES // 3 + 1)  # three of them exceed the byte limit
    batches = [
        _batch(short),
        _batch([]),
        _batch([big] * 5 + ["y"]),
        _batch(["z" * (ARROW_BATCH_BYTES + 1)]),
    ]
    pieces = list(bounded(iter(batches), max_lines=10_000))
    got = [v for p in pieces for v in p.column("value").to_pylist()]
    want = [v for b in batches for v in b.column("value").to_pylist()]
    assert got == want
    for p in pieces:
        assert 1 <= p.num_rows <= 10_000
        size = sum(len(v) for v in p.column("value").to_pylist())
        assert p.num_rows == 1 or size <= ARROW_BATCH_BYTES
    assert [p.num_rows for p in pieces[:3]] == [10_000, 10_000, 5_000]
