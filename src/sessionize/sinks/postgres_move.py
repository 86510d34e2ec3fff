"""Moving a PostgreSQL output to another schema of its database, in one transaction.

The output's tables are the outputs (`sessions`, ..., `open_sessions`) and every
`_sessionize_*` table (staged rows, attempts, published batches, the lease and records of
a batch job); a state store in the same schema keeps other names and stays. Each moves
with `ALTER TABLE ... SET SCHEMA` (its indexes go with it, no row is copied); the
transaction holds both schemas' publish locks, so it moves all or nothing. Run again after
it committed, it finds the tables in the new schema and moves nothing.
"""

from __future__ import annotations

from urllib.parse import urlsplit

import psycopg
from psycopg import sql
from psycopg.types.json import Jsonb

from sessionize.errors import ConfigError
from sessionize.schema import OUTPUTS
from sessionize.sinks.postgres_records import LEASE, RECORDS, read_record
from sessionize.sinks.postgres_target import Target, connection_errors, parse
from sessionize.sinks.replaced import REPLACED

_OURS = sorted({*OUTPUTS, *REPLACED})
_PREFIX = "_sessionize_"  # every table of the sink's own (postgres_tables.py)
MOVED_FROM = "moved-from"  # a record of the moved output: the place it left


def move_schema(output: str, new: str) -> int:
    """Move the tables of `output` into the schema `new` names; returns how many moved
    (0: they are there already, or the output has none).

    Args:
        output: the output's URI (`postgresql://USER@HOST/DB?schema=OLD`).
        new: the same database with another schema (`...?schema=NEW`).

    Raises:
        ConfigError: `new` is another server or database, or its schema holds an output.
        SinkError: the server refused (one line, no password).

    >>> move_schema("postgresql://me@db/app?schema=web", "postgresql://me@db/app?schema=old")
    ... # doctest: +SKIP
    7
    """
    old, to = parse(output), parse(new)
    if _database(old) != _database(to):
        raise ConfigError(
            f"--move-output {to.shown}: a PostgreSQL output moves to another schema of its "
            f"own database ({_database(old)}?schema=NEW); to write elsewhere, start a new "
            "--checkpoint there"
        )
    with (
        connection_errors(f"moving {old.shown} to schema {to.schema}", old),
        psycopg.connect(old.conninfo) as conn,
        conn.transaction(),
    ):
        for schema in sorted({old.schema, to.schema}):  # the sink's publish lock
            conn.execute(
                "SELECT pg_advisory_xact_lock(hashtext(%s))", (f"sessionize-sink:{schema}",)
            )
        there, here = _tables(conn, to.schema), _tables(conn, old.schema)
        if there and here:
            raise ConfigError(
                f"--move-output {to.shown}: schema {to.schema} holds an output already "
                f"({', '.join(there[:4])}): give a new or empty schema"
            )
        conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(to.schema)))
        for table in here:
            conn.execute(
                sql.SQL("ALTER TABLE {} SET SCHEMA {}").format(
                    sql.Identifier(old.schema, table), sql.Identifier(to.schema)
                )
            )
        if LEASE in here:  # the mover's epoch, taken in the old schema, is given back
            conn.execute(
                sql.SQL(
                    "UPDATE {} SET holder = jsonb_set(holder, '{{released}}', 'true') WHERE "
                    "epoch = (SELECT max(epoch) FROM {})"
                ).format(sql.Identifier(to.schema, LEASE), sql.Identifier(to.schema, LEASE))
            )
        if RECORDS in here:  # how a move run again knows it is done
            conn.execute(
                sql.SQL(
                    "INSERT INTO {} VALUES (%s, %s) ON CONFLICT (name) DO UPDATE SET "
                    "body = EXCLUDED.body"
                ).format(sql.Identifier(to.schema, RECORDS)),
                (MOVED_FROM, Jsonb({"from": old.shown})),
            )
        return len(here)


def moved_already(output: str, new: str) -> bool:
    """Whether `new` holds the output that a move took from `output` (whose schema holds
    none of it now): a move run again after its transaction committed."""
    if holds_output(output):
        return False
    return read_record(new, MOVED_FROM).get("from") == parse(output).shown


def holds_output(output: str) -> bool:
    """Whether the schema of `output` holds any of an output's tables."""
    target = parse(output)
    with (
        connection_errors(f"reading {target.shown}", target),
        psycopg.connect(target.conninfo) as conn,
    ):
        return bool(_tables(conn, target.schema))


def _tables(conn: psycopg.Connection, schema: str) -> list[str]:
    rows = conn.execute(
        "SELECT tablename FROM pg_tables WHERE schemaname = %s AND (tablename = ANY(%s) OR "
        "starts_with(tablename, %s)) ORDER BY 1",
        (schema, _OURS, _PREFIX),
    ).fetchall()
    return [r[0] for r in rows]


def _database(target: Target) -> str:
    """`postgresql://HOST[:PORT]/DB`: the database, whoever connects to it."""
    parts = urlsplit(target.shown)
    return f"postgresql://{parts.netloc.rpartition('@')[2]}{parts.path}"
