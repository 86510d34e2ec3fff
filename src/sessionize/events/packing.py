"""A reading task's rows packed by state partition, so that they cross the shuffle as values.

Spark's shuffle costs per row: each typed row crosses from the Python task into the JVM,
through the parse's projections, is sorted and written by the shuffle, and is converted back
to Arrow for the partition task. The reading task knows where Spark would place each row
(`stateful.partitioner`: the same hash), so it packs the rows of each state partition into
one Arrow IPC stream, a value of the column PACKED, in a row whose key is that partition's
mark key (engines/batch_marks.py): a few rows per task and partition cross instead of every
row. The partition task unpacks them (`unpack`); every key reaches the partition it always
did, and a rerun of the task packs the same rows.

Columns named `shared` (a page URL, referrer, user agent: long values that a user's events
repeat) cross dictionary-encoded: each distinct value once per packed stream, then an
index per row; `unpack` gives them back as plain strings, the values unchanged.

Rows the task cannot finish (the exact path's lines) and the mark rows travel as rows.
A task holds at most FLUSH_ROWS rows or FLUSH_BYTES of them before it sends what it has.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sessionize.core.partitioner import placed_here, spark_partitions

PACKED = "_packed_rows"  # an Arrow IPC stream of rows of the partition the row's key is in
FLUSH_ROWS = 65_536
FLUSH_BYTES = 64 << 20


def packed_schema(schema: pa.Schema) -> pa.Schema:
    """`schema` with the PACKED column."""
    return schema.append(pa.field(PACKED, pa.binary()))


def pack(
    batches: Iterator[pa.RecordBatch],
    keys: pa.Array,
    key: str,
    packable: Callable[[pa.RecordBatch], pa.Array],
    columns: list[str],
    shared: Collection[str] = (),
) -> Iterator[pa.RecordBatch]:
    """`batches` in `packed_schema`: the rows where `packable` holds leave packed, their
    `columns` only (those of `shared` dictionary-encoded), by the partition of their `key`
    (one per key of `keys`, in partition order); the others as they are, PACKED NULL. Keys
    of a type whose placement is not computed here (`partitioner.placed_here`) leave every
    row as it is."""
    held: list[pa.RecordBatch] = []
    rows = size = 0
    schema, placed = None, False
    for b in batches:
        if schema is None:
            schema = packed_schema(b.schema)
            placed = placed_here(b.schema.field(key).type)
        keep = packable(b) if placed else pa.array(np.zeros(b.num_rows, bool))
        rest = b.filter(pc.invert(keep))
        if rest.num_rows:
            yield rest.append_column(PACKED, pa.nulls(rest.num_rows, pa.binary()))
        mine = b.filter(keep).select(columns)
        if mine.num_rows:
            held.append(mine)
            rows, size = rows + mine.num_rows, size + mine.nbytes
        if rows >= FLUSH_ROWS or size >= FLUSH_BYTES:
            yield _packed(held, keys, key, schema, shared)
            held, rows, size = [], 0, 0
    if held:
        yield _packed(held, keys, key, schema, shared)


def _packed(
    held: list[pa.RecordBatch],
    keys: pa.Array,
    key: str,
    schema: pa.Schema,
    shared: Collection[str] = (),
) -> pa.RecordBatch:
    """One row per partition that `held` has rows of: its mark key and its rows, packed."""
    table = pa.Table.from_batches(held)
    for i, name in enumerate(table.column_names):
        if name in shared:  # encoded before the rows are reordered: only indices move
            values = table.column(i).combine_chunks()
            table = table.set_column(i, name, pc.dictionary_encode(values))
    where = spark_partitions(table.column(key), len(keys))
    order = np.argsort(where, kind="stable")
    table = table.take(pa.array(order))
    counts = np.bincount(where, minlength=len(keys))
    parts = np.flatnonzero(counts)
    starts = np.cumsum(counts) - counts
    out = {f.name: pa.nulls(len(parts), f.type) for f in schema}
    out[key] = keys.take(pa.array(parts)).cast(schema.field(key).type)
    out[PACKED] = _streams([table.slice(starts[p], counts[p]) for p in parts])
    return pa.RecordBatch.from_pydict(out, schema=schema)


def _streams(tables: list[pa.Table]) -> pa.BinaryArray:
    """One Arrow IPC stream of each table, as the values of one binary array (written one
    after the other into its data, not copied there)."""
    sink = pa.BufferOutputStream()
    offsets = [0]
    for table in tables:
        with pa.ipc.new_stream(sink, table.schema) as writer:
            writer.write_table(table)
        offsets.append(sink.tell())
    bounds = pa.array(offsets, pa.int32())
    return pa.BinaryArray.from_buffers(
        pa.binary(), len(tables), [None, bounds.buffers()[1], sink.getvalue()]
    )


def unpack(rows: pa.Table) -> pa.Table:
    """A partition task's rows with the packed ones unpacked, in `rows`' columns but PACKED
    (rows without the column pass as they are)."""
    if PACKED not in rows.column_names:
        return rows
    is_packed = pc.is_valid(rows[PACKED])
    plain = rows.filter(pc.invert(is_packed)).drop_columns([PACKED])
    # as_buffer: the packed streams are read where they lie, not copied
    unpacked = [
        pa.ipc.open_stream(value.as_buffer())
        .read_all()
        .select(plain.column_names)
        .cast(plain.schema)
        for value in rows.filter(is_packed)[PACKED]
    ]
    return pa.concat_tables([plain, *unpacked]) if unpacked else plain
