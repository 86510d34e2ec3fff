"""Arrow <-> bytes for stored state (`layered.py` applies decoded deltas in memory).

Shared by backends that store whole tables or deltas as blobs (files now; a remote backend
storing snapshot groups later). A *delta* is the puts of a version plus its removed keys in
one table: the state schema with every column nullable and a `_removed` flag; a removed key
is one row with only the key set.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from sessionize.errors import StateError
from sessionize.state.rows import RowSpec

REMOVED = "_removed"


def delta_schema(spec: RowSpec) -> pa.Schema:
    fields = [f.with_nullable(True) for f in spec.schema]
    return pa.schema([*fields, pa.field(REMOVED, pa.bool_(), nullable=False)])


def encode_delta(puts: pa.Table, removes: pa.Array, spec: RowSpec) -> pa.Table:
    schema = delta_schema(spec)
    fields = [schema.field(i) for i in range(len(schema) - 1)]
    put_part = puts.cast(pa.schema(fields)).append_column(
        schema.field(REMOVED), pa.array([False] * puts.num_rows, pa.bool_())
    )
    n = len(removes)
    columns = [
        removes.cast(pa.int64()) if f.name == spec.key else pa.nulls(n, f.type) for f in fields
    ]
    removed_part = pa.Table.from_arrays([*columns, pa.array([True] * n, pa.bool_())], schema=schema)
    return pa.concat_tables([put_part, removed_part])


def decode_delta(delta: pa.Table, spec: RowSpec) -> tuple[pa.Table, pa.Int64Array]:
    """(puts, removed keys) of a delta table."""
    if delta.schema.names != delta_schema(spec).names:
        raise StateError("a state delta file does not match the state schema")
    flag = delta.column(REMOVED)
    removes = delta.filter(flag).column(spec.key).combine_chunks()
    puts = delta.filter(pc.invert(flag)).drop_columns([REMOVED]).cast(spec.schema)
    return puts, removes


def to_parquet(table: pa.Table, compression: str = "zstd") -> pa.Buffer:
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink, compression=compression)
    return sink.getvalue()


def from_parquet(data: pa.Buffer | bytes) -> pa.Table:
    return pq.read_table(pa.BufferReader(data))
