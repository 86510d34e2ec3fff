"""The `postgresql` state store: one row per key and version range, in a few SQL round trips
per micro-batch.

URI: `postgresql://USER[:PASSWORD]@HOST[:PORT]/DB?schema=sessionize` (prefer PGPASSWORD or
~/.pgpass to a password in the URI). Options: `schema` (the PostgreSQL schema holding the
tables, created if missing; default `sessionize`), and the libpq options `connect_timeout`
(default 5 s), `sslmode`, `sslrootcert`, `sslcert`, `sslkey`, `application_name`.

The tables and what each row holds are in `postgres_layout.py`.

A version V is the set of state rows with `valid_from <= V < coalesce(valid_to, inf)`; it
exists iff its `versions` row does. Committing V on the loaded version P is one SQL
transaction (so a failed batch leaves nothing visible), serialized per partition by an
advisory lock: drop what versions after P wrote (a re-executed batch, or reprocessing),
close the current rows of the changed keys (`valid_to = V`), COPY the new rows in
(`valid_from = V`, binary COPY built with numpy), insert V's `versions` row.

Round trips per partition and batch: open 1; `get_many` 1 per 20,000 keys (`key = ANY`);
`expiring` 1 (partial index on `expires_us` of current rows); commit 6-9, whatever the
number of keys. Maintenance deletes the rows that ended at or before the oldest retained
version; `truncate_after` deletes rows that began after the version and reopens the rows it
ended.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any, TypeVar
from urllib.parse import quote, unquote, urlencode, urlsplit

import numpy as np
import psycopg
import pyarrow as pa
from psycopg import sql

from sessionize.errors import ConfigError, StateError
from sessionize.redaction import MASK, check_userinfo, redact_uri
from sessionize.state.backends import postgres_layout as layout
from sessionize.state.backends.common import one_line, read_query
from sessionize.state.backends.keyblobs import RowCodec
from sessionize.state.backends.postgres_layout import copy_chunks, ddl, in_schema, pg_array
from sessionize.state.backends.postgres_pool import pool_for, scalar
from sessionize.state.backends.postgres_version import PostgresVersion
from sessionize.state.base import StateBackend, base_gone_error, fenced_error, version_error
from sessionize.state.rows import EMPTY_VERSION, RowSpec
from sessionize.state.stored import Meta

T = TypeVar("T")

# The libpq connection options a postgresql:// URI may carry (the state store and the sink).
LIBPQ_OPTIONS = (
    "connect_timeout",
    "sslmode",
    "sslrootcert",
    "sslcert",
    "sslkey",
    "application_name",
)
_SCHEMA_NAME = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")
_READY: set[tuple[str, str]] = set()  # (conninfo, schema) whose tables exist, this process


class PostgresBackend(StateBackend[PostgresVersion]):
    scheme = "postgresql"

    def __init__(self, uri: str, *, spec: RowSpec | None = None):
        super().__init__(spec)
        self._parse(uri)
        self.codec = RowCodec(self.spec)
        self._partition_ids: dict[tuple[str, int], int] = {}

    # ----- configuration ----------------------------------------------------------------

    def _parse(self, uri: str) -> None:
        check_userinfo(uri, "state store URI")  # after it, no error text holds the password
        try:
            parts = urlsplit(uri)
            port = parts.port
        except ValueError as e:
            raise ConfigError(f"state store URI {redact_uri(uri)!r} is not valid: {e}") from None
        if parts.scheme.lower() not in ("postgresql", "postgres"):
            raise ConfigError(f"not a PostgreSQL URI: {redact_uri(uri)!r}")
        if not parts.hostname or not parts.path.strip("/"):
            raise ConfigError(
                f"state store URI {redact_uri(uri)!r} needs a host and a database:"
                " postgresql://USER@HOST:PORT/DB"
            )
        known = ("schema", *LIBPQ_OPTIONS)
        given, _ = read_query(parts.query, known, redact_uri(uri))
        options = {"schema": "sessionize", **given}
        if not _SCHEMA_NAME.match(options["schema"]):
            raise ConfigError(
                f"schema={options['schema']!r}: use lower-case letters, digits and '_'"
            )
        if "connect_timeout" in options and not options["connect_timeout"].isdigit():
            raise ConfigError(f"connect_timeout={options['connect_timeout']!r} is not seconds")
        self.schema = options.pop("schema")
        self._options = options
        user = unquote(parts.username) if parts.username else None
        # a recorded URI's masked password: the client finds it (PGPASSWORD, ~/.pgpass)
        masked = parts.password in (None, MASK)
        self._password = None if masked or parts.password is None else unquote(parts.password)
        netloc = ""
        if user is not None:
            netloc = quote(user, safe="")
            if self._password is not None:
                netloc += ":" + quote(self._password, safe="")
            netloc += "@"
        host = parts.hostname if ":" not in parts.hostname else f"[{parts.hostname}]"
        netloc += host + (f":{port}" if port else "")
        self._base = f"postgresql://{netloc}{parts.path}"
        self._redacted_base = redact_uri(self._base)
        libpq = {"connect_timeout": "5", **options}
        self._conninfo = f"{self._base}?{urlencode(libpq)}"

    @property
    def uri(self) -> str:
        options = {"schema": self.schema} if self.schema != "sessionize" else {}
        options.update(self._options)
        return self._base + (f"?{urlencode(options)}" if options else "")

    @classmethod
    def from_uri(cls, uri: str, spec: RowSpec | None = None) -> PostgresBackend:
        return cls(uri, spec=spec)

    def check(self) -> None:
        self._run("connect", lambda conn: conn.execute("SELECT 1"))

    # ----- connections and errors -------------------------------------------------------

    def _ensure_tables(self, conn: psycopg.Connection) -> None:
        key = (self._conninfo, self.schema)
        if key in _READY:
            return
        with conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", ("sessionize:ddl",))
            for statement in ddl(self.schema):
                conn.execute(statement)
        _READY.add(key)

    def _run(self, what: str, work: Callable[[psycopg.Connection], T]) -> T:
        """Run `work(conn)` (one idempotent transaction) on a pooled connection, retried
        once after a server restart (`ConnectionPool.run`). Database errors become one-line
        StateErrors without credentials."""

        def run(conn: psycopg.Connection) -> T:
            self._ensure_tables(conn)
            return work(conn)

        try:
            return pool_for(self._conninfo).run(run)
        except psycopg.Error as e:
            raise StateError(
                f"PostgreSQL state store {self._redacted_base} (schema {self.schema}):"
                f" {what} failed: {one_line(e, self._password)}"
            ) from None

    def _sql(self, query: str) -> sql.Composed:
        """`query` with {partitions}, {versions}, {state}, {job_records} filled in."""
        return in_schema(self.schema, query)

    def _partition_id(
        self, conn: psycopg.Connection, job: str, partition: int, create: bool
    ) -> int | None:
        """The `pid` of (job, partition), from `partitions` (a new one if `create`)."""
        pid = self._partition_ids.get((job, partition))
        if pid is not None:
            return pid
        if create:
            conn.execute(
                self._sql(
                    "INSERT INTO {partitions} (job, part) VALUES (%s, %s)"
                    " ON CONFLICT (job, part) DO NOTHING"
                ),
                (job, partition),
            )
        row = conn.execute(
            self._sql("SELECT pid FROM {partitions} WHERE job = %s AND part = %s"), (job, partition)
        ).fetchone()
        if row is None:
            return None
        found: int = row[0]
        self._partition_ids[(job, partition)] = found
        return found

    def _lock_partition(self, conn: psycopg.Connection, pid: int) -> None:
        """Serialize the writers of a partition until the end of the SQL transaction."""
        conn.execute(
            "SELECT pg_advisory_xact_lock(hashtext(%s), %s::integer)", (self.schema, pid % 2**31)
        )

    # ----- partitions -------------------------------------------------------------------

    def _versions(self, job: str, partition: int) -> list[int]:
        return self._run("listing versions", lambda c: self._committed(c, job, partition))

    def _committed(self, conn: psycopg.Connection, job: str, partition: int) -> list[int]:
        rows = conn.execute(
            self._sql(
                "SELECT v.version FROM {versions} v JOIN {partitions} p USING (pid)"
                " WHERE p.job = %s AND p.part = %s ORDER BY v.version"
            ),
            (job, partition),
        ).fetchall()
        return [r[0] for r in rows]

    def _partitions(self, job: str) -> list[int]:
        query = self._sql(
            "SELECT p.part FROM {partitions} p WHERE p.job = %s"
            " AND EXISTS (SELECT 1 FROM {versions} v WHERE v.pid = p.pid) ORDER BY p.part"
        )
        rows = self._run("listing partitions", lambda c: c.execute(query, (job,)).fetchall())
        return [r[0] for r in rows]

    def _open_version(self, job: str, partition: int, version: int) -> PostgresVersion:
        if version == EMPTY_VERSION:
            return PostgresVersion(self, job, partition, version, {}, None, 0, 0)

        def load(conn: psycopg.Connection) -> tuple[Any, list[int] | None]:
            row = conn.execute(
                self._sql(
                    "SELECT p.pid, v.meta::text, v.keys, v.bytes FROM {versions} v"
                    " JOIN {partitions} p USING (pid)"
                    " WHERE p.job = %s AND p.part = %s AND v.version = %s"
                ),
                (job, partition, version),
            ).fetchone()
            return row, (None if row else self._committed(conn, job, partition))

        row, have = self._run(f"opening {job}/{partition} at version {version}", load)
        if row is None:
            raise version_error(job, partition, version, have=have)
        pid, meta, keys, nbytes = row
        stored = PostgresVersion(self, job, partition, version, json.loads(meta), pid, keys, nbytes)
        stored.metrics.round_trips += 1
        return stored

    def _commit(
        self, stored: PostgresVersion, version: int, puts: pa.Table, removes: pa.Array, meta: Meta
    ) -> None:
        job, partition, base = stored.job, stored.partition, stored.version
        encoded = self.codec.encode(puts)
        changed = np.concatenate([encoded.keys, removes.to_numpy(zero_copy_only=False)])
        meta_text = json.dumps(meta, allow_nan=False)

        def commit(conn: psycopg.Connection) -> tuple[int, int, int]:
            trips = 0
            with conn.transaction():
                pid = self._partition_id(conn, job, partition, create=True)
                assert pid is not None  # created if missing
                self._lock_partition(conn, pid)
                trips += self._check_fence(conn, job, stored.epoch)
                rows = conn.execute(
                    self._sql(
                        "SELECT version, keys, bytes FROM {versions}"
                        " WHERE pid = %s AND version >= %s ORDER BY version"
                    ),
                    (pid, base),
                ).fetchall()
                trips += 3
                keys, nbytes = 0, 0
                if base != EMPTY_VERSION:
                    if not rows or rows[0][0] != base:
                        raise base_gone_error(job, partition, version, base)
                    keys, nbytes = rows[0][1], rows[0][2]
                    later = len(rows) > 1
                else:
                    later = True  # the empty state: whatever is stored goes
                if later:
                    trips += self._drop_after(conn, pid, base)
                closed_row = conn.execute(
                    self._sql(
                        "WITH c AS (UPDATE {state} SET valid_to = %s"
                        " WHERE pid = %s AND valid_to IS NULL AND key = ANY(%s::bigint[])"
                        " RETURNING octet_length(data) AS b)"
                        " SELECT count(*), coalesce(sum(b), 0) FROM c"
                    ),
                    (version, pid, pg_array(changed)),
                ).fetchone()
                assert closed_row is not None  # an aggregate: one row
                closed, closed_bytes = closed_row
                trips += 1
                written = 0
                if len(encoded.keys):
                    query = self._sql(
                        "COPY {state} (pid, key, valid_from, expires_us, n_rows, data)"
                        " FROM STDIN (FORMAT binary)"
                    )
                    with conn.cursor().copy(query) as copy:
                        for chunk in copy_chunks(pid, version, encoded):
                            copy.write(chunk)
                            written += len(chunk)
                    trips += 1
                keys = keys - closed + len(encoded.keys)
                nbytes = nbytes - int(closed_bytes) + encoded.nbytes
                conn.execute(
                    self._sql(
                        "INSERT INTO {versions} (pid, version, meta, keys, bytes)"
                        " VALUES (%s, %s, %s, %s, %s)"
                    ),
                    (pid, version, meta_text, keys, nbytes),
                )
                trips += 2  # the insert, and COMMIT
            stored.metrics.round_trips += trips
            return keys, nbytes, written

        keys, nbytes, written = self._run(
            f"committing version {version} of {job}/{partition}", commit
        )
        metrics = stored.metrics
        metrics.keys, metrics.bytes = keys, nbytes
        metrics.rows_written += puts.num_rows
        metrics.bytes_written += written + len(meta_text)
        metrics.extra["keys_written"] = len(encoded.keys)

    def _drop_after(self, conn: psycopg.Connection, pid: int, after: int) -> int:
        """Delete what versions after `after` wrote (in the caller's locked transaction);
        the round trips it took."""
        if after == EMPTY_VERSION:
            conn.execute(self._sql("DELETE FROM {state} WHERE pid = %s"), (pid,))
            conn.execute(self._sql("DELETE FROM {versions} WHERE pid = %s"), (pid,))
            return 2
        conn.execute(
            self._sql("DELETE FROM {state} WHERE pid = %s AND valid_from > %s"), (pid, after)
        )
        conn.execute(
            self._sql("UPDATE {state} SET valid_to = NULL WHERE pid = %s AND valid_to > %s"),
            (pid, after),
        )
        conn.execute(
            self._sql("DELETE FROM {versions} WHERE pid = %s AND version > %s"), (pid, after)
        )
        left = scalar(
            conn.execute(
                self._sql("SELECT EXISTS (SELECT 1 FROM {versions} WHERE pid = %s)"), (pid,)
            )
        )
        if not left:  # nothing restorable remains: drop rows maintenance had kept
            conn.execute(self._sql("DELETE FROM {state} WHERE pid = %s"), (pid,))
        return 4 + (not left)

    def _truncate_partition(self, job: str, partition: int, after: int) -> None:
        self._when_stored(
            f"truncating {job}/{partition} after version {after}",
            job,
            partition,
            lambda conn, pid: self._drop_after(conn, pid, after),
        )

    def _maintain(self, job: str, partition: int, keep_from: int) -> None:
        def maintain(conn: psycopg.Connection, pid: int) -> None:
            conn.execute(
                self._sql("DELETE FROM {state} WHERE pid = %s AND valid_to <= %s"),
                (pid, keep_from),
            )
            conn.execute(
                self._sql("DELETE FROM {versions} WHERE pid = %s AND version < %s"),
                (pid, keep_from),
            )

        self._when_stored(f"maintenance of {job}/{partition}", job, partition, maintain)

    def _when_stored(
        self, what: str, job: str, partition: int, work: Callable[[psycopg.Connection, int], object]
    ) -> None:
        """`work(conn, pid)` in one SQL transaction holding the partition's lock, if the
        partition has ever been stored."""

        def locked(conn: psycopg.Connection) -> None:
            with conn.transaction():
                pid = self._partition_id(conn, job, partition, create=False)
                if pid is not None:
                    self._lock_partition(conn, pid)
                    work(conn, pid)

        self._run(what, locked)

    # ----- job records ------------------------------------------------------------------

    def _write_job_record(self, job: str, version: int, body: str, epoch: int | None) -> None:
        query = self._sql(
            "INSERT INTO {job_records} (job, version, record) VALUES (%s, %s, %s)"
            " ON CONFLICT (job, version) DO UPDATE SET record = EXCLUDED.record,"
            " written_at = now()"
        )
        self._write_unless_fenced(
            job, epoch, query, (job, version, body), f"writing job record {job}/{version}"
        )

    def _write_job_settings(self, job: str, body: str, epoch: int | None) -> None:
        query = self._sql(
            "INSERT INTO {job_settings} (job, settings) VALUES (%s, %s) ON CONFLICT (job)"
            " DO UPDATE SET settings = EXCLUDED.settings, written_at = now()"
        )
        self._write_unless_fenced(
            job, epoch, query, (job, body), f"writing the settings of job {job}"
        )

    def _write_unless_fenced(
        self, job: str, epoch: int | None, query: sql.Composed, params: tuple[Any, ...], what: str
    ) -> None:
        """Run the write `query` of the job's log (a record, the settings) in a transaction
        that first checks the fence."""

        def write(conn: psycopg.Connection) -> None:
            with conn.transaction():
                self._check_fence(conn, job, epoch)
                conn.execute(query, params)

        self._run(what, write)

    def _read_job_settings(self, job: str) -> str | None:
        query = self._sql("SELECT settings::text FROM {job_settings} WHERE job = %s")
        row = self._run(
            f"reading the settings of job {job}", lambda c: c.execute(query, (job,)).fetchone()
        )
        return None if row is None else row[0]

    # ----- the fence (the `fences` table, postgres_layout.py) -----------------------------

    def _check_fence(self, conn: psycopg.Connection, job: str, epoch: int | None) -> int:
        """In the caller's transaction: fenced_error if a newer epoch fenced the job (the
        row stays share-locked until the commit). The round trips it took."""
        if epoch is None:
            return 0
        fence = layout.fence_of(conn, self.schema, job, lock=True)
        if fence > epoch:
            raise fenced_error(job, epoch, fence)
        return 1

    def _raise_fence(self, job: str, epoch: int, partitions: list[int]) -> int:
        return self._run(f"fencing {job}", lambda c: layout.raise_fence(c, self.schema, job, epoch))

    def _read_fence(self, job: str) -> int:
        return self._run(
            f"reading the fence of {job}",
            lambda c: layout.fence_of(c, self.schema, job, lock=False),
        )

    def _read_job_record(self, job: str, version: int) -> str | None:
        query = self._sql("SELECT record::text FROM {job_records} WHERE job = %s AND version = %s")
        row = self._run(
            f"reading job record {job}/{version}",
            lambda c: c.execute(query, (job, version)).fetchone(),
        )
        return None if row is None else row[0]

    def _job_versions(self, job: str) -> list[int]:
        query = self._sql("SELECT version FROM {job_records} WHERE job = %s ORDER BY version")
        rows = self._run(
            f"listing job records of {job}", lambda c: c.execute(query, (job,)).fetchall()
        )
        return [r[0] for r in rows]

    def _delete_job_records(self, job: str, versions: list[int]) -> None:
        if not versions:
            return
        query = self._sql("DELETE FROM {job_records} WHERE job = %s AND version = ANY(%s)")
        self._run(
            f"deleting job records of {job}", lambda c: c.execute(query, (job, sorted(versions)))
        )
