"""The outputs as PostgreSQL tables, committed exactly once (`--output postgresql://...`).

The URI and its options: `postgres_target.py`. The tables are in `postgres_tables.py`.

A task stages its rows of each output with one transaction: delete what this (batch,
partition) staged before, then a binary COPY (a retried task replaces its rows). The
driver's `clear_staging` drops a failed attempt's staged rows and opens the attempt (a row
in `_sessionize_attempts`); `publish` is ONE transaction over every output: the batch's
published rows are deleted, its staged rows moved in, the staging and the attempt dropped,
and the batch's `_sessionize_batches` row written. A crash before its commit leaves the
previous content and the staged rows (the rerun stages again); after it, the batch is there
once, and a repeated publish (nothing staged, no attempt open) changes nothing.
`invalidate_from` deletes the batches from N of every output and their batch rows in a
transaction of its own. Readers therefore see whole batches 0..K at every moment, across
all the outputs (unlike files, where each output is switched on its own). With
`--open-sessions`, the same transaction first replaces the touched users' rows of
`open_sessions` (`postgres_replaced.py`); with `--revise-within`, it keeps `sessions` and
`page_views` current by `session_id` (`postgres_revised.py`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

import psycopg
import pyarrow as pa
from psycopg import sql
from psycopg.types.json import Jsonb

from sessionize import faults
from sessionize.errors import ConfigError, SinkError
from sessionize.sinks import postgres_replaced as replaced
from sessionize.sinks import postgres_revised as revised
from sessionize.sinks.base import Capabilities
from sessionize.sinks.outputs import Outputs, session_outputs
from sessionize.sinks.postgres_tables import (
    ATTEMPTS,
    BATCHES,
    copy_rows,
    ddl,
    replaced_ddl,
    staged_table,
    table_exists,
    to_arrow,
)
from sessionize.sinks.postgres_target import (  # noqa: F401 - parse and Target re-exported
    REPUBLISHED,
    Target,
    connection_errors,
    parse,
)
from sessionize.state.backends.postgres_pool import pool_for, scalar

T = TypeVar("T")
RAISE = object()  # `_run(missing=RAISE)`: a missing table is an error like any other

_READY: set[tuple[str, str, Outputs]] = set()  # (conninfo, schema, outputs) made, here


@dataclass(frozen=True)
class PostgresSink:
    """Pickles as its URI, job and outputs; every process opens its own connections
    (pooled). A table per output, created from its declared columns plus `batch_id`; an
    output replaced by key has its declared columns only, indexed by its key."""

    root: str
    job: str = "sessionize"
    outputs: Outputs = field(default_factory=session_outputs)
    capabilities = Capabilities(
        keeps_records=True, replaces_by_key=True, keeps_current=True, upserts_revisions=True
    )

    @functools.cached_property
    def target(self) -> Target:
        return parse(self.root)

    @classmethod
    def check_place(cls, uri: str) -> None:
        """The URI and its schema name, before anything is recorded."""
        parse(uri)

    @property
    def record_place(self) -> str:
        return self.root

    def records(self):  # -> postgres_records.PostgresRecords
        from sessionize.sinks.postgres_records import PostgresRecords

        return PostgresRecords(self.root)

    def owner_records(self):  # -> postgres_records.PostgresOwnerRecords
        from sessionize.sinks.postgres_records import PostgresOwnerRecords

        return PostgresOwnerRecords(self.root)

    def check(self) -> None:
        """Nothing to probe: a connection error is one line at the first write."""

    def check_retractable(self, batch_id: int, accept_hint: str = "") -> None:
        """Batches of tables can be removed."""

    def accepting_duplicates(self) -> PostgresSink:
        return self

    def nothing_to_maintain(self) -> str | None:
        return (
            f"--output {self.target.shown}: PostgreSQL outputs leave nothing to clean "
            "(a publish drops its staged rows; VACUUM is the server's)"
        )

    def no_outputs(self) -> str:
        return (
            f"--output {self.target.shown} holds no sessionize output: schema "
            f"{self.target.schema} has no sessions table; give the schema= the job writes "
            "(default sessionize)"
        )

    def committed(self, name: str):  # -> ds.Dataset | None
        import pyarrow.dataset as ds

        table = self.read(name)
        return None if table is None else ds.dataset(table)

    # -- the Sink protocol -----------------------------------------------------------------
    def write_part(self, name: str, batch_id: int, partition: int, table: pa.Table) -> int:
        if table.num_rows == 0:  # as the file sinks: a retried task of an attempt is
            return 0  # deterministic, and clear_staging emptied the batch's staging
        staged = self._table(staged_table(name))

        def stage(conn: psycopg.Connection) -> int:
            with conn.transaction():
                conn.execute(
                    sql.SQL("DELETE FROM {} WHERE batch_id = %s AND part = %s").format(staged),
                    (batch_id, partition),
                )
                self._copy(conn, staged, _with_batch(table, batch_id, partition))
            return table.num_rows

        return self._run(f"staging batch {batch_id} of {name}", stage, create=True, writes=True)

    def write_replaced(
        self, name: str, batch_id: int, partition: int, keys: pa.Table, table: pa.Table
    ) -> int:
        keyed = keys.select(list(self.outputs.spec(name).key))
        keyed_rows, rows = (_with_batch(t, batch_id, partition) for t in (keyed, table))

        def stage(conn: psycopg.Connection) -> int:
            replaced.stage(
                conn, self.target.schema, name, batch_id, partition, keyed_rows, rows, self._copy
            )
            return table.num_rows

        return self._run(f"staging batch {batch_id} of {name}", stage, create=True, writes=True)

    def replaced_as_of(self, name: str) -> int | None:
        return self._run(
            f"reading the batch of {name}",
            lambda c: replaced.as_of(c, self.target.schema, name),
            missing=None,
        )

    def close(self) -> None:
        """Nothing to close: connections are pooled per process (`_run`)."""

    def clear_staging(self, batch_id: int) -> None:
        def clear(conn: psycopg.Connection) -> None:
            with conn.transaction():
                for name in self._replaced:
                    replaced.clear(conn, self.target.schema, name, batch_id)
                for name in self._appended:
                    conn.execute(
                        sql.SQL("DELETE FROM {} WHERE batch_id = %s").format(
                            self._table(staged_table(name))
                        ),
                        (batch_id,),
                    )
                conn.execute(
                    sql.SQL("INSERT INTO {} VALUES (%s) ON CONFLICT DO NOTHING").format(
                        self._table(ATTEMPTS)
                    ),
                    (batch_id,),
                )

        self._run(f"clearing staged batch {batch_id}", clear, create=True, writes=True)

    def publish(self, batch_id: int) -> None:
        """One transaction over every output (see the module's docstring)."""

        def publish(conn: psycopg.Connection) -> None:
            faults.pause_point("publishing", batch_id)
            with conn.transaction():
                self._lock(conn)
                opened = (
                    conn.execute(
                        sql.SQL("DELETE FROM {} WHERE batch_id = %s RETURNING 1").format(
                            self._table(ATTEMPTS)
                        ),
                        (batch_id,),
                    ).fetchone()
                    is not None
                )
                counts: dict[str, int] = {}
                for spec in self.outputs.replaced:
                    name = spec.name
                    moved = replaced.publish(
                        conn,
                        self.target.schema,
                        name,
                        self._schema(name).names,
                        spec.key,
                        batch_id,
                        opened,
                    )
                    if moved is not None:
                        counts[name] = moved
                    faults.pause_point(f"published-{name}", batch_id)
                if revised.revising(self.outputs):
                    columns = {n: self._schema(n).names for n in (revised.SESSIONS, "page_views")}
                    folded = revised.publish(conn, self.target.schema, columns, batch_id, opened)
                    counts.update(folded or {})
                    faults.pause_point("published-sessions", batch_id)
                for name in self._appended:
                    if name not in self._folded:
                        counts[name] = self._publish_output(conn, name, batch_id, opened)
                        faults.pause_point(f"published-{name}", batch_id)
                if opened or any(n is not None and n > 0 for n in counts.values()):
                    conn.execute(
                        sql.SQL(
                            "INSERT INTO {} (batch_id, row_counts) VALUES (%s, %s) ON CONFLICT "
                            "(batch_id) DO UPDATE SET row_counts = EXCLUDED.row_counts, "
                            "published_at = now()"
                        ).format(self._table(BATCHES)),
                        (batch_id, Jsonb(counts)),
                    )

        self._run(
            f"publishing batch {batch_id} to {self.target.shown}", publish, create=True, writes=True
        )

    def _publish_output(
        self, conn: psycopg.Connection, name: str, batch_id: int, opened: bool
    ) -> int:
        """Replace the batch's rows of `name` by its staged ones; the rows moved (0 when
        the batch was published already and nothing is staged: then nothing changes)."""
        final, staged = self._table(name), self._table(staged_table(name))
        columns = sql.SQL(", ").join(
            sql.Identifier(c) for c in [*self._schema(name).names, "batch_id"]
        )
        has_rows = scalar(
            conn.execute(
                sql.SQL("SELECT EXISTS (SELECT 1 FROM {} WHERE batch_id = %s)").format(staged),
                (batch_id,),
            )
        )
        if not (has_rows or opened):
            return 0
        conn.execute(sql.SQL("DELETE FROM {} WHERE batch_id = %s").format(final), (batch_id,))
        moved = conn.execute(
            sql.SQL("INSERT INTO {} ({}) SELECT {} FROM {} WHERE batch_id = %s").format(
                final, columns, columns, staged
            ),
            (batch_id,),
        ).rowcount
        conn.execute(sql.SQL("DELETE FROM {} WHERE batch_id = %s").format(staged), (batch_id,))
        return moved

    def invalidate_from(self, batch_id: int) -> list[int]:
        kept = [s.name for s in self.outputs.replaced if s.name not in self.outputs.rebuilt]
        if kept:
            raise ConfigError(
                f"output(s) {', '.join(kept)} are replaced by key and cannot be set back "
                f"to batch {batch_id - 1}; write the job to a new output instead"
            )

        def invalidate(conn: psycopg.Connection) -> list[int]:
            retired: set[int] = set()
            with conn.transaction():
                self._lock(conn)
                tables = [n for n in self._appended if n not in revised.REVISION_OUTPUTS]
                schema = self.target.schema
                gone = [n for n in (BATCHES, *tables) if not table_exists(conn, schema, n)]
                if len(gone) == len(tables) + 1:
                    return []  # never written: nothing to remove
                if gone:  # a table dropped by hand: removing the others would lose it
                    raise SinkError(
                        f"{where}: its table(s) {', '.join(gone)} are missing; restore "
                        "them, or write the job to a new output"
                    )
                retired |= revised.undo(conn, self.target.schema, batch_id)
                for name in self._appended:
                    if name in revised.REVISION_OUTPUTS:
                        continue  # folded into sessions and page_views: no table
                    rows = conn.execute(
                        sql.SQL("DELETE FROM {} WHERE batch_id >= %s RETURNING batch_id").format(
                            self._table(name)
                        ),
                        (batch_id,),
                    ).fetchall()
                    retired |= {r[0] for r in rows}
                conn.execute(
                    sql.SQL("DELETE FROM {} WHERE batch_id >= %s").format(self._table(BATCHES)),
                    (batch_id,),
                )
                for name in self.outputs.rebuilt:
                    replaced.retire(conn, self.target.schema, name)
            return sorted(retired)

        where = f"removing batches from {batch_id} of {self.target.shown}"
        # Every table is there (checked above): one missing now is an error, not "nothing".
        return self._run(where, invalidate, missing=RAISE)

    def rows_from(self, name: str, batch_id: int) -> int:
        if name in self._replaced:
            return 0  # replaced by key: emptied and rebuilt, not removed by batch
        written = revised.REVISED_BATCH if self._folded and name == revised.SESSIONS else "batch_id"
        query = sql.SQL("SELECT count(*) FROM {} WHERE {} >= %s").format(
            self._table(name), sql.Identifier(written)
        )
        return self._run(
            f"counting rows of {name}",
            lambda c: scalar(c.execute(query, (batch_id,))),
            missing=0,
        )

    def published(self, name: str) -> list[int]:
        if name in self._replaced:
            return []
        query = sql.SQL("SELECT DISTINCT batch_id FROM {} ORDER BY 1").format(self._table(name))
        return self._run(
            f"reading the batches of {name}", lambda c: [r[0] for r in c.execute(query)], missing=[]
        )

    def staged_counts(self, name: str, batch_id: int, column: str) -> dict[str, int]:
        query = sql.SQL("SELECT {}, count(*) FROM {} WHERE batch_id = %s GROUP BY 1").format(
            sql.Identifier(column), self._table(staged_table(name))
        )
        return self._run(
            f"reading staged batch {batch_id} of {name}",
            lambda c: dict(c.execute(query, (batch_id,)).fetchall()),
            missing={},
        )

    # -- readers -----------------------------------------------------------------------------
    def read(self, name: str) -> pa.Table | None:
        """Output `name` as its readers see it (None when the table does not exist)."""

        def read(conn: psycopg.Connection) -> pa.Table | None:
            columns = conn.execute(
                "SELECT column_name, udt_name FROM information_schema.columns WHERE "
                "table_schema = %s AND table_name = %s ORDER BY ordinal_position",
                (self.target.schema, name),
            ).fetchall()
            if not columns:
                return None
            rows = conn.execute(sql.SQL("SELECT * FROM {}").format(self._table(name))).fetchall()
            return to_arrow(columns, rows)

        return self._run(f"reading {name}", read)

    # -- connections -------------------------------------------------------------------------
    def _table(self, name: str) -> sql.Identifier:
        return sql.Identifier(self.target.schema, name)

    def _schema(self, name: str) -> pa.Schema:
        schema = self.outputs.schema(name)
        if schema is None:
            raise ConfigError(f"output {name}: its columns are not known to this command")
        return schema

    @property
    def _appended(self) -> tuple[str, ...]:
        return tuple(s.name for s in self.outputs.appended)

    @property
    def _folded(self) -> tuple[str, ...]:
        """The outputs `postgres_revised` publishes (none without `--revise-within`)."""
        return revised.FOLDED if revised.revising(self.outputs) else ()

    @property
    def _replaced(self) -> tuple[str, ...]:
        return tuple(s.name for s in self.outputs.replaced)

    def _lock(self, conn: psycopg.Connection) -> None:
        """Publishes and invalidations of one schema take turns."""
        conn.execute(
            "SELECT pg_advisory_xact_lock(hashtext(%s))", (f"sessionize-sink:{self.target.schema}",)
        )

    def _copy(self, conn: psycopg.Connection, target: sql.Identifier, table: pa.Table) -> None:
        types, rows = copy_rows(table)
        names = sql.SQL(", ").join(map(sql.Identifier, table.column_names))
        query = sql.SQL("COPY {} ({}) FROM STDIN (FORMAT BINARY)").format(target, names)
        with conn.cursor().copy(query) as copy:
            copy.set_types(types)
            for row in rows:
                copy.write_row(row)

    def _ensure_tables(self, conn: psycopg.Connection) -> None:
        key = (self.target.conninfo, self.target.schema, self.outputs)
        if key in _READY:
            return
        appended = {s.name: s.schema for s in self.outputs.appended if s.schema is not None}
        staged_only = revised.REVISION_OUTPUTS if self._folded else ()
        statements = ddl(self.target.schema, appended, staged_only)
        for spec in self.outputs.replaced:
            assert spec.schema is not None, spec.name
            statements += replaced_ddl(
                self.target.schema, spec.name, spec.schema, spec.key_schema()
            )
        with conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", ("sessionize:ddl",))
            for statement in statements:
                conn.execute(statement)
            for statement in revised.ddl(self.target.schema) if self._folded else []:
                conn.execute(statement)
        _READY.add(key)

    def _run(
        self,
        what: str,
        work: Callable[[psycopg.Connection], T],
        *,
        create: bool = False,
        missing: object = None,
        writes: bool = False,
    ) -> T:
        """`work(conn)` on a pooled connection, creating the tables first when `create`
        (else a missing table gives `missing`); `writes`: a step of a batch's commit, which a
        restarted job does again. A connection idle in the pool may have died
        with a server restart: then the work (one transaction, idempotent) is retried once
        on a new connection. Database errors become one SinkError line without the
        password."""

        def run(conn: psycopg.Connection) -> T:
            if create:
                self._ensure_tables(conn)
            return work(conn)

        after_lost = REPUBLISHED if writes else ""
        try:
            with connection_errors(what, self.target, after_lost):
                return pool_for(self.target.conninfo).run(run)
        except SinkError as e:
            undefined = isinstance(e.__cause__, psycopg.errors.UndefinedTable)
            if undefined and not create and missing is not RAISE:
                return missing  # type: ignore[return-value]
            raise


def _with_batch(table: pa.Table, batch_id: int, partition: int) -> pa.Table:
    n = table.num_rows
    table = table.append_column("batch_id", pa.array([batch_id] * n, pa.int64()))
    return table.append_column("part", pa.array([partition] * n, pa.int32()))
