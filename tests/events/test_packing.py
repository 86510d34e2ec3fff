"""A reading task's rows packed by partition (`events.packing`): every row comes back once,
in the partition its key is placed in, and a task holds a bounded number of rows."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sessionize.core.partitioner import spark_partitions
from sessionize.events import packing
from sessionize.events.packing import PACKED, pack, unpack

KEYS = pa.array([100, 101, 102, 103])  # a key per partition, as if Spark placed key i in i


def _batches(n_batches: int, rows: int) -> Iterator[pa.RecordBatch]:
    for b in range(n_batches):
        users = pa.array(np.arange(rows) * 7 + b, pa.int64())
        mark = pa.array([None] * (rows - 1) + [1], pa.int64())  # the last row travels as is
        yield pa.RecordBatch.from_pydict(
            {"user_id": users, "page": pc.cast(users, pa.string()), "mark": mark}
        )


def _kept(b: pa.RecordBatch) -> pa.Array:
    return pc.is_null(b.column("mark"))


def test_rows_come_back_once_each_packed_in_their_partition():
    out = pa.Table.from_batches(
        list(pack(_batches(3, 1000), KEYS, "user_id", _kept, ["user_id", "page"]))
    )
    packed = out.filter(pc.is_valid(out[PACKED]))
    for key, value in zip(packed["user_id"].to_pylist(), packed[PACKED], strict=True):
        rows = pa.ipc.open_stream(value.as_buffer()).read_all()
        where = spark_partitions(rows["user_id"], len(KEYS))
        assert set(where.tolist()) == {KEYS.to_pylist().index(key)}
    back = unpack(out.drop_columns(["mark"]))
    expected = pa.Table.from_batches(list(_batches(3, 1000))).drop_columns(["mark"])
    assert sorted(back.to_pylist(), key=str) == sorted(expected.to_pylist(), key=str)
    assert out.filter(pc.is_null(out[PACKED])).num_rows == 3  # the rows left as rows


def test_a_task_sends_what_it_holds_at_the_bound(monkeypatch):
    monkeypatch.setattr(packing, "FLUSH_ROWS", 2500)
    read = 0

    def counted() -> Iterator[pa.RecordBatch]:
        nonlocal read
        for b in _batches(10, 1000):
            read += b.num_rows
            yield b

    held_at_first_packed = None
    for b in pack(counted(), KEYS, "user_id", _kept, ["user_id", "page"]):
        if held_at_first_packed is None and b.column(PACKED).null_count < b.num_rows:
            held_at_first_packed = read
    assert held_at_first_packed == 3000  # sent once 2,997 rows were held, not at the end


def test_keys_whose_placement_is_not_computed_here_travel_as_rows():
    batch = pa.RecordBatch.from_pydict(
        {"user_id": pa.array([1, 2, 3], pa.int32()), "mark": pa.nulls(3, pa.int64())}
    )
    out = pa.Table.from_batches(list(pack(iter([batch]), KEYS, "user_id", _kept, ["user_id"])))
    assert out[PACKED].null_count == out.num_rows == 3
