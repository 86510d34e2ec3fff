"""What a job keeps with its output, for an output in PostgreSQL: the output's lease (one
driver writes it at a time), its owner record (`_owner.json`, sinks/owner.py) and a batch
job's JSON records (`_sessionize.json`: the state and job it goes with), as rows of the
output's schema.

    _sessionize_lease (epoch bigint, holder jsonb)   one row per lease epoch
    _sessionize_records (name text, body jsonb)      one row per record name

An epoch is created by an INSERT that does nothing when the epoch exists (two racing
drivers: one gets it), as the lease's file records are by an exclusive create.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import TypeVar

import psycopg
from psycopg import sql
from psycopg.types.json import Jsonb

from sessionize.sinks.owner import RECORD, Owner, OwnerRecords
from sessionize.sinks.postgres_tables import BATCHES, table_exists
from sessionize.sinks.postgres_target import Target, connection_errors, parse
from sessionize.state.lease import Holder, Lease, LeaseRecords
from sessionize.state.records import Records

T = TypeVar("T")
LEASE = "_sessionize_lease"
RECORDS = "_sessionize_records"


def _run(
    target: Target,
    what: str,
    work: Callable[[psycopg.Connection], T],
    missing: T | None = None,
    *,
    create: bool = False,
) -> T:
    """`work(conn)`, after creating the schema and tables when `create` (taking a lease,
    writing a record); without it a missing table reads as `missing`, so that reading the
    lease of a moved output (sinks/postgres_move.py) does not create an empty one."""
    with connection_errors(what, target), psycopg.connect(target.conninfo) as conn:
        if create:
            _create(conn, target.schema)
        try:
            return work(conn)
        except (psycopg.errors.UndefinedTable, psycopg.errors.InvalidSchemaName):
            if create:
                raise
            return missing  # type: ignore[return-value]


def _create(conn: psycopg.Connection, schema: str) -> None:
    # Two jobs' first steps on a new schema create it at once: one after the other.
    conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (f"records:{schema}",))
    conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(schema)))
    conn.execute(
        sql.SQL(
            "CREATE TABLE IF NOT EXISTS {} (epoch bigint PRIMARY KEY, holder jsonb NOT NULL)"
        ).format(sql.Identifier(schema, LEASE))
    )
    conn.execute(
        sql.SQL(
            "CREATE TABLE IF NOT EXISTS {} (name text PRIMARY KEY, body jsonb NOT NULL)"
        ).format(sql.Identifier(schema, RECORDS))
    )
    conn.commit()


def _insert_new(target: Target, table: sql.Identifier, values: tuple, doing: str) -> bool:
    """INSERT the row `values` into `table` unless its key is there (atomically, the
    tables created first where missing): True when this call inserted it."""
    query = sql.SQL("INSERT INTO {} VALUES (%s, %s) ON CONFLICT DO NOTHING").format(table)
    return _run(target, doing, lambda c: c.execute(query, values).rowcount == 1, create=True)


class PostgresLeaseRecords(LeaseRecords):
    """The epochs of an output's lease, in its schema."""

    def __init__(self, output: str):
        self.target = parse(output)
        self.table = sql.Identifier(self.target.schema, LEASE)

    def latest(self) -> Holder | None:
        query = sql.SQL("SELECT holder FROM {} ORDER BY epoch DESC LIMIT 1").format(self.table)
        row = _run(self.target, "reading the output's lease", lambda c: c.execute(query).fetchone())
        return None if row is None else Holder(**row[0])

    def create(self, holder: Holder) -> bool:
        values = (holder.epoch, Jsonb(json.loads(holder.to_json())))
        return _insert_new(self.target, self.table, values, "taking the output's lease")

    def update(self, holder: Holder) -> None:
        query = sql.SQL("UPDATE {} SET holder = %s WHERE epoch = %s").format(self.table)
        values = (Jsonb(json.loads(holder.to_json())), holder.epoch)
        _run(self.target, "renewing the output's lease", lambda c: c.execute(query, values))


def read_record(output: str, name: str) -> dict:
    """The record `name` kept with the output ({} when there is none)."""
    target = parse(output)
    query = sql.SQL("SELECT body FROM {} WHERE name = %s").format(
        sql.Identifier(target.schema, RECORDS)
    )
    row = _run(target, f"reading {name}", lambda c: c.execute(query, (name,)).fetchone())
    return {} if row is None else row[0]


def write_record(output: str, name: str, record: dict) -> None:
    """Keep `record` as `name` with the output (replacing the one before)."""
    target = parse(output)
    query = sql.SQL(
        "INSERT INTO {} VALUES (%s, %s) ON CONFLICT (name) DO UPDATE SET body = EXCLUDED.body"
    ).format(sql.Identifier(target.schema, RECORDS))
    _run(target, f"writing {name}", lambda c: c.execute(query, (name, Jsonb(record))), create=True)


class PostgresRecords(Records):
    """A job's records kept with a PostgreSQL output: rows of `_sessionize_records`, and
    its lease's epochs in `_sessionize_lease`."""

    def __init__(self, output: str):
        self.place = output

    def read(self, name: str) -> dict:
        return read_record(self.place, name)

    def write(self, name: str, record: dict) -> None:
        write_record(self.place, name, record)

    def lease_records(self) -> LeaseRecords:
        return PostgresLeaseRecords(self.place)

    def lease(self, what: str) -> Lease:
        return Lease(self.lease_records(), f"{what} {parse(self.place).shown}")

    @property
    def shown(self) -> str:
        return parse(self.place).shown


class PostgresOwnerRecords(OwnerRecords):
    """The output's owner record as the row `_owner.json` of `_sessionize_records`, created
    by an INSERT that does nothing where the row exists (of two racing jobs one gets it).
    Reading creates nothing: a job refused at start leaves the schema as it was."""

    def __init__(self, output: str):
        self.output = output
        self.target = parse(output)
        self.table = sql.Identifier(self.target.schema, RECORDS)

    def read(self) -> Owner | None:
        query = sql.SQL("SELECT body FROM {} WHERE name = %s").format(self.table)
        row = self._if_there(
            RECORDS, "reading the output's owner", lambda c: c.execute(query, (RECORD,)).fetchone()
        )
        return Owner.from_json(json.dumps(row[0])) if row else None

    def create(self, owner: Owner) -> bool:
        values = (RECORD, Jsonb(json.loads(owner.to_json())))
        return _insert_new(self.target, self.table, values, "recording the output's owner")

    def replace(self, owner: Owner) -> None:
        write_record(self.output, RECORD, json.loads(owner.to_json()))

    def written(self) -> list[str]:
        """The outputs named by the published batches' rows (`_sessionize_batches`)."""
        query = sql.SQL("SELECT row_counts FROM {}").format(
            sql.Identifier(self.target.schema, BATCHES)
        )

        def names(conn: psycopg.Connection) -> list[str]:
            return sorted(
                {n for (counts,) in conn.execute(query) for n, rows in counts.items() if rows}
            )

        return self._if_there(BATCHES, "reading the output's batches", names) or []

    def _if_there(self, table: str, what: str, work: Callable[[psycopg.Connection], T]) -> T | None:
        """`work` where the schema has `table`, else None; creates nothing."""
        with connection_errors(what, self.target), psycopg.connect(self.target.conninfo) as c:
            return work(c) if table_exists(c, self.target.schema, table) else None
