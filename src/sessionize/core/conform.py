"""A table returned by a processor, checked against what it declared: the same columns, the
same types, no nulls where the declaration forbids them."""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from sessionize.errors import ProcessorError


def conform(table: Any, schema: pa.Schema, *, who: str, what: str) -> pa.Table:
    """`table` with exactly `schema` (columns reordered by name, nullability as declared).

    Args:
        table: a pyarrow Table or RecordBatch.
        schema: the declared columns and types.
        who: the processor's name, for the message.
        what: what the table is ("output 'totals'", "state"), for the message.

    Returns:
        The table with the declared schema.

    Raises:
        ProcessorError: naming the processor, the table and the first column that differs.
    """
    if isinstance(table, pa.RecordBatch):
        table = pa.Table.from_batches([table])
    if not isinstance(table, pa.Table):
        raise ProcessorError(
            f"processor {who}: {what} must be a pyarrow Table, not {type(table).__name__}"
        )
    names = table.column_names
    missing = [n for n in schema.names if n not in names]
    if missing:
        raise ProcessorError(f"processor {who}: {what} lacks declared column(s) {missing}")
    extra = [n for n in names if n not in schema.names]
    if extra:
        raise ProcessorError(f"processor {who}: {what} has undeclared column(s) {extra}")
    if len(set(names)) != len(names):
        raise ProcessorError(f"processor {who}: {what} has duplicate column names")
    table = table.select(schema.names)
    for field, column in zip(schema, table.columns, strict=True):
        if column.type != field.type:
            raise ProcessorError(
                f"processor {who}: {what} column '{field.name}' is {column.type}, "
                f"declared {field.type}"
            )
        if not field.nullable and column.null_count:
            raise ProcessorError(
                f"processor {who}: {what} column '{field.name}' has nulls, declared not null"
            )
    return table.cast(schema)
