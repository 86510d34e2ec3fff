"""The PostgreSQL sink's outputs replaced by key (`open_sessions`, sinks/replaced.py).

Tasks stage rows and touched keys in `_sessionize_staged_NAME` and
`_sessionize_staged_NAME_keys`. The batch's publish transaction (the same that moves the
batch's rows of every other output in and writes its batch row) deletes the output's rows
of the touched keys, inserts the staged rows, and records the batch in
`_sessionize_replaced`: a reader sees a session either open or emitted, never both, and
never neither. Removing batches (rewind, reprocessing) empties the output and forgets that
batch, in the same transaction, so that the next batch rebuilds it from the state.
"""

from __future__ import annotations

import psycopg
import pyarrow as pa
from psycopg import sql

from sessionize.sinks.postgres_tables import REPLACED_AT, staged_table, table_exists
from sessionize.sinks.replaced import keys_name
from sessionize.state.backends.postgres_pool import scalar


def stage(
    conn: psycopg.Connection,
    schema: str,
    name: str,
    batch_id: int,
    partition: int,
    keys: pa.Table,
    rows: pa.Table,
    copy,
) -> None:
    """One task's rows and keys, replacing what the same (batch, partition) staged."""
    with conn.transaction():
        for staged, table in ((staged_table(keys_name(name)), keys), (staged_table(name), rows)):
            target = sql.Identifier(schema, staged)
            conn.execute(
                sql.SQL("DELETE FROM {} WHERE batch_id = %s AND part = %s").format(target),
                (batch_id, partition),
            )
            if table.num_rows:
                copy(conn, target, table)


def clear(conn: psycopg.Connection, schema: str, name: str, batch_id: int) -> None:
    for staged in (staged_table(name), staged_table(keys_name(name))):
        conn.execute(
            sql.SQL("DELETE FROM {} WHERE batch_id = %s").format(sql.Identifier(schema, staged)),
            (batch_id,),
        )


def publish(
    conn: psycopg.Connection,
    schema: str,
    name: str,
    columns: list[str],
    key: tuple[str, ...],
    batch_id: int,
    opened: bool,
) -> int | None:
    """Replace the touched keys' rows by the staged ones (inside the caller's transaction);
    the rows inserted, or None when the batch was published already (nothing staged)."""
    final = sql.Identifier(schema, name)
    staged = sql.Identifier(schema, staged_table(name))
    keys = sql.Identifier(schema, staged_table(keys_name(name)))
    has_keys = scalar(
        conn.execute(
            sql.SQL("SELECT EXISTS (SELECT 1 FROM {} WHERE batch_id = %s)").format(keys),
            (batch_id,),
        )
    )
    if not (has_keys or opened):
        return None
    key_columns = sql.SQL(", ").join(map(sql.Identifier, key))
    conn.execute(
        sql.SQL("DELETE FROM {} WHERE ({}) IN (SELECT {} FROM {} WHERE batch_id = %s)").format(
            final, key_columns, key_columns, keys
        ),
        (batch_id,),
    )
    names = sql.SQL(", ").join(map(sql.Identifier, columns))
    moved = conn.execute(
        sql.SQL("INSERT INTO {} ({}) SELECT {} FROM {} WHERE batch_id = %s").format(
            final, names, names, staged
        ),
        (batch_id,),
    ).rowcount
    clear(conn, schema, name, batch_id)
    conn.execute(
        sql.SQL(
            "INSERT INTO {} (name, batch_id) VALUES (%s, %s) ON CONFLICT (name) DO UPDATE "
            "SET batch_id = EXCLUDED.batch_id"
        ).format(sql.Identifier(schema, REPLACED_AT)),
        (name, batch_id),
    )
    return moved


def retire(conn: psycopg.Connection, schema: str, name: str) -> None:
    """Empty the output and forget its batch (inside the caller's transaction), if it is
    there: it is rebuilt by the next batch. A job keeps some outputs replaced by key and
    not others (`identities` without `open_sessions`): a missing table is nothing to
    empty, where its error would roll back the whole removal."""
    if not all(table_exists(conn, schema, table) for table in (REPLACED_AT, name)):
        return
    conn.execute(sql.SQL("DELETE FROM {}").format(sql.Identifier(schema, name)))
    conn.execute(
        sql.SQL("DELETE FROM {} WHERE name = %s").format(sql.Identifier(schema, REPLACED_AT)),
        (name,),
    )


def as_of(conn: psycopg.Connection, schema: str, name: str) -> int | None:
    row = conn.execute(
        sql.SQL("SELECT batch_id FROM {} WHERE name = %s").format(
            sql.Identifier(schema, REPLACED_AT)
        ),
        (name,),
    ).fetchone()
    return None if row is None else row[0]
