"""A Delta table replaced by key (`open_sessions`): one MERGE per batch.

The MERGE's source is the batch's new rows (`_op = 'put'`) plus one row per touched key
(`_op = 'key'`, other columns null). Every target row of a touched key matches its one key
row and is deleted; the put rows never match and are inserted. Delete and insert are one
commit, which records the job's transaction (app id = job, version = batch), so a publish
repeated with nothing newly staged is skipped, and a replayed one (its attempt open) gives
the same table again: deleting a key's rows and inserting its new ones is idempotent.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa

DeltaSink = Any  # sinks/delta.py's, which imports this module

_OP = "_sessionize_op"


def replace_by_key(
    sink: DeltaSink,
    name: str,
    batch_id: int,
    keys: pa.Table,
    rows: pa.Table,
    *,
    replay: bool,
    key: tuple[str, ...],
) -> None:
    """Replace the rows of `keys` (columns `key`) in table `name` by `rows`, in one commit."""
    from deltalake import CommitProperties, Transaction, write_deltalake

    dt = sink.table(name)
    if dt is not None and not replay:
        done = dt.transaction_version(sink.job)
        if done is not None and done >= batch_id:
            return  # committed already, and nothing new was staged
    props = CommitProperties(
        app_transactions=[Transaction(sink.job, batch_id)],
        custom_metadata={"sessionize.batch_id": str(batch_id)},
    )
    if dt is None:  # the first commit creates the table with this batch's rows
        write_deltalake(
            sink.table_uri(name),
            rows,
            mode="append",
            storage_options=sink.storage_options(),
            commit_properties=props,
        )
        return
    merge_replace(dt, keys, rows, key, props)


def merge_replace(dt, keys: pa.Table, rows: pa.Table, key: tuple[str, ...], props) -> None:
    """In one commit of Delta table `dt` with `props`: delete the rows of `keys`, insert
    `rows` (with no key, an append: a commit even without rows, so that it records
    `props`)."""
    from deltalake import write_deltalake

    if keys.num_rows == 0:
        write_deltalake(dt, rows, mode="append", commit_properties=props)
        return
    source = _merge_source(keys, rows, key)
    columns = {c: f"s.`{c}`" for c in rows.column_names}
    same = " AND ".join(f"t.`{c}` = s.`{c}`" for c in key)
    (
        dt.merge(
            source,
            f"{same} AND s.{_OP} = 'key'",
            source_alias="s",
            target_alias="t",
            commit_properties=props,
        )
        .when_matched_delete()
        .when_not_matched_insert(columns, predicate=f"s.{_OP} = 'put'")
        .execute()
    )


def clear_replaced(sink: DeltaSink, name: str) -> None:
    """Empty table `name` and mark it to be rebuilt (transaction version -1): the batches
    it reflected are being removed."""
    from deltalake import CommitProperties, Transaction

    dt = sink.table(name)
    if dt is None:
        return
    props = CommitProperties(
        app_transactions=[Transaction(sink.job, -1)], custom_metadata={"sessionize.cleared": "true"}
    )
    dt.delete(commit_properties=props)


def _merge_source(keys: pa.Table, rows: pa.Table, key: tuple[str, ...]) -> pa.Table:
    nullable = pa.schema([f.with_nullable(True) for f in rows.schema]).append(
        pa.field(_OP, pa.string())
    )
    puts = rows.append_column(_OP, pa.array(["put"] * rows.num_rows, pa.string()))
    key_rows = {c: pa.nulls(keys.num_rows, rows.schema.field(c).type) for c in rows.column_names}
    for c in key:
        key_rows[c] = keys[c].cast(rows.schema.field(c).type)
    key_rows[_OP] = pa.array(["key"] * keys.num_rows, pa.string())
    return pa.concat_tables([puts.cast(nullable), pa.table(key_rows, schema=nullable)])
