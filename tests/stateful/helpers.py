"""Processors and tables for the keyed core's tests."""

from __future__ import annotations

from collections.abc import Callable

import pyarrow as pa
import xxhash

from sessionize import stateful
from sessionize.core.step import PartitionStep, step

TS = pa.timestamp("us", tz="UTC")
NEVER = 253_402_300_799_999_999  # 9999-12-31T23:59:59.999999Z
INT = pa.int64()
OUT = pa.schema([("k", pa.int64()), ("n", pa.int64())])
ORDER_COLUMNS = "customer_id long, amount double"  # the orders of examples/running_totals.py

Respond = Callable[[pa.Table, pa.Table, stateful.Context], stateful.Update]


class Probe(stateful.Processor):
    """Records every call; answers with `respond` (default: an empty Update)."""

    key = "k"
    event_time = "t"
    state_schema = pa.schema([("k", pa.int64()), ("v", pa.int64())])
    outputs = {"out": OUT}

    def __init__(self, respond: Respond | None = None) -> None:
        self.calls: list[tuple[pa.Table, pa.Table, stateful.Context]] = []
        self.respond = respond or (lambda state, rows, ctx: stateful.Update())

    def process(self, state, rows, ctx):
        self.calls.append((state, rows, ctx))
        return self.respond(state, rows, ctx)


class StringProbe(Probe):
    state_schema = pa.schema([("k", pa.string()), ("v", pa.int64())])
    outputs = {}


def spark_xxhash64(text: str) -> int:
    """Spark's xxhash64 of a string column, written out: XXH64 of the UTF-8, seed 42."""
    value = xxhash.xxh64_intdigest(text.encode(), seed=42)
    return value - (1 << 64) if value >= 1 << 63 else value


def stored(processor: stateful.Processor, rows: list[tuple], store_key=None) -> pa.Table:
    """Stored rows from (k, v, timer_us or None); string keys get their hash as store key
    (or `store_key(k)` when given, to make keys collide)."""
    string = processor.state_schema.field("k").type == pa.string()
    cols = {
        "k": pa.array([r[0] for r in rows], processor.state_schema.field("k").type),
        "v": pa.array([r[1] for r in rows], pa.int64()),
        processor.timer_column: pa.array(
            [NEVER if r[2] is None else r[2] for r in rows], pa.int64()
        ).cast(TS),
    }
    if string:
        hash_of = store_key or spark_xxhash64
        cols[processor.store_key_column] = pa.array([hash_of(r[0]) for r in rows], pa.int64())
    return pa.table(cols)


def events(keys: list, times: list[int] | None = None, key_type: pa.DataType = INT) -> pa.Table:
    cols = {"k": pa.array(keys, key_type)}
    if times is not None:
        cols["t"] = pa.array(times, pa.int64()).cast(TS)
    return pa.table(cols)


def run(
    processor: stateful.Processor,
    state: pa.Table | None,
    rows: pa.Table,
    before: int | None = None,
    after: int | None = None,
    batch_id: int = 0,
) -> PartitionStep:
    return step(
        processor,
        state,
        rows,
        batch_id=batch_id,
        partition=3,
        watermark_before=before,
        watermark_after=after,
    )


def as_rows(result: PartitionStep, processor: stateful.Processor) -> list[tuple]:
    """The puts as sorted (k, v, timer_us or None)."""
    t = result.puts.column(processor.timer_column).cast(pa.int64()).to_pylist()
    out = zip(
        result.puts.column("k").to_pylist(), result.puts.column("v").to_pylist(), t, strict=True
    )
    return sorted((k, v, None if at == NEVER else at) for k, v, at in out)
