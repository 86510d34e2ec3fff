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


def test_shared_columns_cross_each_distinct_value_once_and_come_back_as_strings():
    agents = ["Mozilla/5.0 (Windows NT 10.0; Win64; x64) Chrome/120.0 Safari/537.36" * 2, None]
    batches = [
        pa.RecordBatch.from_pydict(
            {
                "user_id": pa.array(np.arange(2000) + 2000 * b, pa.int64()),
                "user_agent": pa.array([agents[i % 2] for i in range(2000)], pa.string()),
                "url": pa.array([f"https://shop.example/p{i % 3}" for i in range(2000)]),
                "mark": pa.nulls(2000, pa.int64()),
            }
        )
        for b in range(3)
    ]
    columns = ["user_id", "user_agent", "url"]
    out = pa.Table.from_batches(
        list(pack(iter(batches), KEYS, "user_id", _kept, columns, ["user_agent", "url"]))
    )
    # what crosses: per packed stream the distinct values once, an index per row
    missing = 0
    for value in out[PACKED]:
        rows = pa.ipc.open_stream(value.as_buffer()).read_all()
        for name in ("user_agent", "url"):
            assert pa.types.is_dictionary(rows.schema.field(name).type)
            assert len(rows[name].chunk(0).dictionary) <= 3
        missing += rows["user_agent"].null_count
    assert missing == 3000
    back = unpack(out.drop_columns(["mark"]))
    assert back.schema == pa.Table.from_batches(batches).select(columns).schema
    expected = [
        {"user_id": u, "user_agent": agents[u % 2], "url": f"https://shop.example/p{u % 2000 % 3}"}
        for u in range(6000)
    ]
    assert sorted(back.to_pylist(), key=lambda r: r["user_id"]) == expected
