"""The `postgresql` state store: one row per key and version range, in a few SQL round trips
per micro-batch.

URI: `postgresql://USER[:PASSWORD]@HOST[:PORT]/DB?schema=sessionize` (prefer PGPASSWORD or
~/.pgpass to a password in the URI). Options: `schema` (the PostgreSQL schema holding the
tables, created if missing; default `sessionize`), and the libpq options `connect_timeout`
(default 5 s), `sslmode`, `sslrootcert`, `sslcert`, `sslkey`, `application_name`.

Layout (in the schema)::

    partitions (pid, job, part)                     one id per (job, partition)
    versions   (pid, version, meta, keys, bytes, committed_at)
                                                    a row per committed version
    state      (pid, key, valid_from, valid_to, expires_us, n_rows, data)
                                                    a key's rows (keyblobs) valid for
                                                    versions valid_from <= v < valid_to
                                                    (valid_to NULL: still current)
    job_records (job, version, record, written_at)  the driver's commit log

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
import os
import re
import threading
from collections.abc import Callable, Iterator
from typing import TypeVar
from urllib.parse import parse_qsl, quote, unquote, urlencode, urlsplit

import numpy as np
import psycopg
import pyarrow as pa
import pyarrow.compute as pc
from psycopg import sql

from sessionize.config import redact_uri
from sessionize.errors import ConfigError, StateError
from sessionize.state.backends.keyblobs import RowCodec
from sessionize.state.base import (
    EMPTY_VERSION,
    RowSpec,
    StateBackend,
    StoredVersion,
    check_job,
    check_partition,
    check_version,
)

T = TypeVar("T")

_LIBPQ_OPTIONS = ("connect_timeout", "sslmode", "sslrootcert", "sslcert", "sslkey",
                  "application_name")  # fmt: skip
_SCHEMA_NAME = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")
KEYS_PER_QUERY = 20_000
_MAX_IDLE = 8
_COPY_HEADER = b"PGCOPY\n\xff\r\n\x00" + bytes(8)
_COPY_TRAILER = b"\xff\xff"
# One binary COPY tuple of (pid, key, valid_from, expires_us, n_rows, data) before `data`.
_COPY_PREFIX = np.dtype(
    [("nf", ">i2"), ("l1", ">i4"), ("pid", ">i8"), ("l2", ">i4"), ("key", ">i8"),
     ("l3", ">i4"), ("vf", ">i8"), ("l4", ">i4"), ("exp", ">i8"), ("l5", ">i4"),
     ("n", ">i4"), ("l6", ">i4")]
)  # fmt: skip


def _ddl(schema: str) -> list[sql.Composed]:
    s = sql.Identifier(schema)
    statements = [
        "CREATE SCHEMA IF NOT EXISTS {s}",
        """CREATE TABLE IF NOT EXISTS {s}.partitions (
            pid bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
            job text NOT NULL,
            part integer NOT NULL,
            UNIQUE (job, part))""",
        """CREATE TABLE IF NOT EXISTS {s}.versions (
            pid bigint NOT NULL REFERENCES {s}.partitions,
            version bigint NOT NULL,
            meta json NOT NULL,
            keys bigint NOT NULL,
            bytes bigint NOT NULL,
            committed_at timestamptz NOT NULL DEFAULT now(),
            PRIMARY KEY (pid, version))""",
        """CREATE TABLE IF NOT EXISTS {s}.state (
            pid bigint NOT NULL,
            key bigint NOT NULL,
            valid_from bigint NOT NULL,
            valid_to bigint,
            expires_us bigint NOT NULL,
            n_rows integer NOT NULL,
            data bytea NOT NULL,
            PRIMARY KEY (pid, key, valid_from))""",
        "CREATE INDEX IF NOT EXISTS state_current_expiry ON {s}.state (pid, expires_us)"
        " WHERE valid_to IS NULL",
        "CREATE INDEX IF NOT EXISTS state_ended ON {s}.state (pid, valid_to)"
        " WHERE valid_to IS NOT NULL",
        "CREATE INDEX IF NOT EXISTS state_began ON {s}.state (pid, valid_from)",
        """CREATE TABLE IF NOT EXISTS {s}.job_records (
            job text NOT NULL,
            version bigint NOT NULL,
            record json NOT NULL,
            written_at timestamptz NOT NULL DEFAULT now(),
            PRIMARY KEY (job, version))""",
    ]
    return [sql.SQL(q).format(s=s) for q in statements]


class _Pool:
    """Idle connections to one database, reused by the tasks of a worker process.

    Explicit and small: a Spark executor runs a task per partition and batch, each with a
    fresh (unpickled) backend; without reuse every task would pay a connection set-up. A
    forked child never touches its parent's connections (it starts a pool of its own and
    keeps the inherited objects alive, so that their finalizers do not close the parent's
    sockets)."""

    def __init__(self, conninfo: str):
        self.conninfo = conninfo
        self.owner = os.getpid()
        self._idle: list[psycopg.Connection] = []
        self._lock = threading.Lock()

    def get(self) -> tuple[psycopg.Connection, bool]:
        """(a connection, whether it was idle in the pool)."""
        with self._lock:
            while self._idle:
                conn = self._idle.pop()
                if not conn.closed:
                    return conn, True
        return psycopg.connect(self.conninfo, autocommit=True), False

    def clear(self) -> None:
        """Close the idle connections (after one of them turned out dead: so are the rest)."""
        with self._lock:
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()

    def put(self, conn: psycopg.Connection) -> None:
        if conn.closed or conn.broken or conn.info.transaction_status.name != "IDLE":
            conn.close()
            return
        with self._lock:
            if len(self._idle) < _MAX_IDLE:
                self._idle.append(conn)
                return
        conn.close()


_POOLS: dict[str, _Pool] = {}
_POOLS_LOCK = threading.Lock()
_INHERITED: list[_Pool] = []  # pools of a parent process, kept alive (never closed) after fork
_READY: set[tuple[str, str]] = set()  # (conninfo, schema) whose tables exist, this process


def _pool(conninfo: str) -> _Pool:
    with _POOLS_LOCK:
        pool = _POOLS.get(conninfo)
        if pool is not None and pool.owner != os.getpid():
            _INHERITED.append(pool)
            pool = None
        if pool is None:
            pool = _POOLS[conninfo] = _Pool(conninfo)
        return pool


class PostgresBackend(StateBackend):
    scheme = "postgresql"

    def __init__(self, uri: str, *, spec: RowSpec | None = None):
        super().__init__(spec)
        self._parse(uri)
        self.codec = RowCodec(self.spec)
        self._pids: dict[tuple[str, int], int] = {}

    # ----- configuration ----------------------------------------------------------------

    def _parse(self, uri: str) -> None:
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
        options: dict[str, str] = {"schema": "sessionize"}
        query = parts.query
        for name, value in parse_qsl(query, keep_blank_values=True, strict_parsing=bool(query)):
            if name != "schema" and name not in _LIBPQ_OPTIONS:
                raise ConfigError(
                    f"unknown option '{name}' in state store URI {redact_uri(uri)!r};"
                    f" known: schema, {', '.join(_LIBPQ_OPTIONS)}"
                )
            options[name] = value
        if not _SCHEMA_NAME.match(options["schema"]):
            raise ConfigError(
                f"schema={options['schema']!r}: use lower-case letters, digits and '_'"
            )
        if "connect_timeout" in options and not options["connect_timeout"].isdigit():
            raise ConfigError(f"connect_timeout={options['connect_timeout']!r} is not seconds")
        self.schema = options.pop("schema")
        self._options = options
        user = unquote(parts.username) if parts.username else None
        self._password = unquote(parts.password) if parts.password is not None else None
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
            for statement in _ddl(self.schema):
                conn.execute(statement)
        _READY.add(key)

    def _run(self, what: str, work: Callable[[psycopg.Connection], T]) -> T:
        """Run `work(conn)` on a pooled connection. A connection that was idle in the pool
        may have died with a server restart: then the idle ones are dropped and the work is
        retried once on a new connection
        (every operation here is a single transaction and idempotent). Database errors
        become one-line StateErrors without credentials."""
        pool = _pool(self._conninfo)
        for attempt in (1, 2):
            conn = None
            try:
                conn, was_idle = pool.get()
                self._ensure_tables(conn)
                result = work(conn)
            except psycopg.Error as e:
                retry = (
                    attempt == 1
                    and conn is not None
                    and was_idle
                    and isinstance(e, psycopg.OperationalError | psycopg.InterfaceError)
                )
                if conn is not None:
                    conn.close()
                if retry:
                    pool.clear()
                    continue
                raise StateError(
                    f"PostgreSQL state store {self._redacted_base} (schema {self.schema}):"
                    f" {what} failed: {self._message(e)}"
                ) from None
            except BaseException:
                if conn is not None:
                    conn.close()
                raise
            pool.put(conn)
            return result
        raise AssertionError("unreachable")

    def _message(self, e: BaseException) -> str:
        text = " ".join(line.strip() for line in str(e).splitlines() if line.strip())
        if self._password:
            text = text.replace(self._password, "***")
        return text or type(e).__name__

    def _t(self, table: str) -> sql.Identifier:
        return sql.Identifier(self.schema, table)

    def _q(self, query: str) -> sql.Composed:
        """`query` with {partitions}, {versions}, {state}, {job_records} filled in."""
        names = ("partitions", "versions", "state", "job_records")
        return sql.SQL(query).format(**{n: self._t(n) for n in names if "{" + n + "}" in query})

    def _pid(self, conn: psycopg.Connection, job: str, partition: int, create: bool) -> int | None:
        pid = self._pids.get((job, partition))
        if pid is not None:
            return pid
        if create:
            conn.execute(
                self._q(
                    "INSERT INTO {partitions} (job, part) VALUES (%s, %s)"
                    " ON CONFLICT (job, part) DO NOTHING"
                ),
                (job, partition),
            )
        row = conn.execute(
            self._q("SELECT pid FROM {partitions} WHERE job = %s AND part = %s"), (job, partition)
        ).fetchone()
        if row is None:
            return None
        self._pids[(job, partition)] = row[0]
        return row[0]

    def _lock(self, conn: psycopg.Connection, pid: int) -> None:
        conn.execute(
            "SELECT pg_advisory_xact_lock(hashtext(%s), %s::integer)", (self.schema, pid % 2**31)
        )

    # ----- partitions -------------------------------------------------------------------

    def versions(self, job: str, partition: int) -> list[int]:
        check_job(job)
        check_partition(partition)
        return self._run("listing versions", lambda c: self._versions(c, job, partition))

    def _versions(self, conn: psycopg.Connection, job: str, partition: int) -> list[int]:
        rows = conn.execute(
            self._q(
                "SELECT v.version FROM {versions} v JOIN {partitions} p USING (pid)"
                " WHERE p.job = %s AND p.part = %s ORDER BY v.version"
            ),
            (job, partition),
        ).fetchall()
        return [r[0] for r in rows]

    def partitions(self, job: str) -> list[int]:
        check_job(job)
        query = self._q(
            "SELECT p.part FROM {partitions} p WHERE p.job = %s"
            " AND EXISTS (SELECT 1 FROM {versions} v WHERE v.pid = p.pid) ORDER BY p.part"
        )
        rows = self._run("listing partitions", lambda c: c.execute(query, (job,)).fetchall())
        return [r[0] for r in rows]

    def _open_version(self, job: str, partition: int, version: int) -> PostgresVersion:
        if version == EMPTY_VERSION:
            return PostgresVersion(self, job, partition, version, {}, None, 0, 0)

        def load(conn: psycopg.Connection):
            row = conn.execute(
                self._q(
                    "SELECT p.pid, v.meta::text, v.keys, v.bytes FROM {versions} v"
                    " JOIN {partitions} p USING (pid)"
                    " WHERE p.job = %s AND p.part = %s AND v.version = %s"
                ),
                (job, partition, version),
            ).fetchone()
            return row, (None if row else self._versions(conn, job, partition))

        row, have = self._run(f"opening {job}/{partition} at version {version}", load)
        if row is None:
            raise StateError(_missing(job, partition, version, have))
        pid, meta, keys, nbytes = row
        stored = PostgresVersion(self, job, partition, version, json.loads(meta), pid, keys, nbytes)
        stored.metrics.round_trips += 1
        return stored

    def _commit(
        self, stored: PostgresVersion, version: int, puts: pa.Table, removes: pa.Array, meta: dict
    ) -> None:
        job, partition, base = stored.job, stored.partition, stored.version
        encoded = self.codec.encode(puts)
        changed = np.concatenate([encoded.keys, removes.to_numpy(zero_copy_only=False)])
        meta_text = json.dumps(meta, allow_nan=False)

        def commit(conn: psycopg.Connection) -> tuple[int, int, int]:
            trips = 0
            with conn.transaction():
                pid = self._pid(conn, job, partition, create=True)
                self._lock(conn, pid)
                rows = conn.execute(
                    self._q(
                        "SELECT version, keys, bytes FROM {versions}"
                        " WHERE pid = %s AND version >= %s ORDER BY version"
                    ),
                    (pid, base),
                ).fetchall()
                trips += 3
                keys, nbytes = 0, 0
                if base != EMPTY_VERSION:
                    if not rows or rows[0][0] != base:
                        raise StateError(
                            f"cannot commit version {version} of {job}/partition={partition}:"
                            f" the version it was built on, {base}, is no longer committed"
                            " (truncated or re-committed meanwhile)"
                        )
                    keys, nbytes = rows[0][1], rows[0][2]
                    later = len(rows) > 1
                else:
                    later = True  # the empty state: whatever is stored goes
                if later:
                    trips += self._drop_after(conn, pid, base)
                closed, closed_bytes = conn.execute(
                    self._q(
                        "WITH c AS (UPDATE {state} SET valid_to = %s"
                        " WHERE pid = %s AND valid_to IS NULL AND key = ANY(%s::bigint[])"
                        " RETURNING octet_length(data) AS b)"
                        " SELECT count(*), coalesce(sum(b), 0) FROM c"
                    ),
                    (version, pid, _pg_array(changed)),
                ).fetchone()
                trips += 1
                written = 0
                if len(encoded.keys):
                    query = self._q(
                        "COPY {state} (pid, key, valid_from, expires_us, n_rows, data)"
                        " FROM STDIN (FORMAT binary)"
                    )
                    with conn.cursor().copy(query) as copy:
                        for chunk in _copy_chunks(pid, version, encoded):
                            copy.write(chunk)
                            written += len(chunk)
                    trips += 1
                keys = keys - closed + len(encoded.keys)
                nbytes = nbytes - int(closed_bytes) + encoded.nbytes
                conn.execute(
                    self._q(
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
        m = stored.metrics
        m.keys, m.bytes = keys, nbytes
        m.rows_written += puts.num_rows
        m.bytes_written += written + len(meta_text)
        m.extra["keys_written"] = len(encoded.keys)

    def _drop_after(self, conn: psycopg.Connection, pid: int, after: int) -> int:
        """Delete what versions after `after` wrote (in the caller's locked transaction);
        the round trips it took."""
        if after == EMPTY_VERSION:
            conn.execute(self._q("DELETE FROM {state} WHERE pid = %s"), (pid,))
            conn.execute(self._q("DELETE FROM {versions} WHERE pid = %s"), (pid,))
            return 2
        conn.execute(
            self._q("DELETE FROM {state} WHERE pid = %s AND valid_from > %s"), (pid, after)
        )
        conn.execute(
            self._q("UPDATE {state} SET valid_to = NULL WHERE pid = %s AND valid_to > %s"),
            (pid, after),
        )
        conn.execute(
            self._q("DELETE FROM {versions} WHERE pid = %s AND version > %s"), (pid, after)
        )
        left = conn.execute(
            self._q("SELECT EXISTS (SELECT 1 FROM {versions} WHERE pid = %s)"), (pid,)
        ).fetchone()[0]
        if not left:  # nothing restorable remains: drop rows maintenance had kept
            conn.execute(self._q("DELETE FROM {state} WHERE pid = %s"), (pid,))
        return 4 + (not left)

    def _truncate_partition(self, job: str, partition: int, after: int) -> None:
        def truncate(conn: psycopg.Connection) -> None:
            with conn.transaction():
                pid = self._pid(conn, job, partition, create=False)
                if pid is None:
                    return
                self._lock(conn, pid)
                self._drop_after(conn, pid, after)

        self._run(f"truncating {job}/{partition} after version {after}", truncate)

    def _maintain(self, job: str, partition: int, keep_from: int) -> None:
        def maintain(conn: psycopg.Connection) -> None:
            with conn.transaction():
                pid = self._pid(conn, job, partition, create=False)
                if pid is None:
                    return
                self._lock(conn, pid)
                conn.execute(
                    self._q("DELETE FROM {state} WHERE pid = %s AND valid_to <= %s"),
                    (pid, keep_from),
                )
                conn.execute(
                    self._q("DELETE FROM {versions} WHERE pid = %s AND version < %s"),
                    (pid, keep_from),
                )

        self._run(f"maintenance of {job}/{partition}", maintain)

    # ----- job records ------------------------------------------------------------------

    def write_job_record(self, job: str, version: int, record: dict) -> None:
        check_job(job)
        check_version(version)
        try:
            body = json.dumps(record, sort_keys=True, allow_nan=False)
        except (TypeError, ValueError) as e:
            raise StateError(f"job record of {job} version {version} is not JSON-able: {e}") from e
        query = self._q(
            "INSERT INTO {job_records} (job, version, record) VALUES (%s, %s, %s)"
            " ON CONFLICT (job, version) DO UPDATE SET record = EXCLUDED.record,"
            " written_at = now()"
        )
        self._run(f"writing job record {job}/{version}",
                  lambda c: c.execute(query, (job, version, body)))  # fmt: skip

    def read_job_record(self, job: str, version: int) -> dict | None:
        check_job(job)
        check_version(version)
        query = self._q("SELECT record::text FROM {job_records} WHERE job = %s AND version = %s")
        row = self._run(f"reading job record {job}/{version}",
                        lambda c: c.execute(query, (job, version)).fetchone())  # fmt: skip
        return None if row is None else json.loads(row[0])

    def job_versions(self, job: str) -> list[int]:
        check_job(job)
        query = self._q("SELECT version FROM {job_records} WHERE job = %s ORDER BY version")
        rows = self._run(f"listing job records of {job}",
                         lambda c: c.execute(query, (job,)).fetchall())  # fmt: skip
        return [r[0] for r in rows]

    def _delete_job_records(self, job: str, versions: list[int]) -> None:
        if not versions:
            return
        query = self._q("DELETE FROM {job_records} WHERE job = %s AND version = ANY(%s)")
        self._run(f"deleting job records of {job}",
                  lambda c: c.execute(query, (job, sorted(versions))))  # fmt: skip


class PostgresVersion(StoredVersion):
    """A partition at a version: reads are SQL queries on the rows valid at that version."""

    def __init__(self, backend: PostgresBackend, job: str, partition: int, version: int,
                 meta: dict, pid: int | None, keys: int, nbytes: int):  # fmt: skip
        super().__init__(job, partition, version, meta, backend.spec)
        self._backend = backend
        self.pid = pid
        self.metrics.keys = keys
        self.metrics.bytes = nbytes

    def read_rows(self, keys: pa.Int64Array) -> pa.Table:
        b = self._backend
        if self.version == EMPTY_VERSION or not len(keys):
            return self.spec.empty()
        query = b._q(
            "SELECT coalesce(string_agg(int8send(key), ''::bytea), ''::bytea),"
            " coalesce(string_agg(int4send(octet_length(data)), ''::bytea), ''::bytea),"
            " coalesce(string_agg(data, ''::bytea), ''::bytea)"
            " FROM {state} WHERE pid = %s AND key = ANY(%s::bigint[])"
            " AND valid_from <= %s AND (valid_to IS NULL OR valid_to > %s)"
        )
        v = self.version
        parts = []
        for lo in range(0, len(keys), KEYS_PER_QUERY):
            chunk = keys.slice(lo, KEYS_PER_QUERY).to_numpy()
            params = (self.pid, _pg_array(chunk), v, v)
            got = b._run(
                f"reading {len(chunk)} keys of {self.job}/{self.partition} at version {v}",
                lambda c, p=params: c.cursor(binary=True).execute(query, p).fetchone(),
            )
            self.metrics.round_trips += 1
            found = np.frombuffer(got[0], dtype=">i8").astype(np.int64)
            lengths = np.frombuffer(got[1], dtype=">i4").astype(np.int64)
            offsets = np.zeros(len(lengths) + 1, dtype=np.int32)
            np.cumsum(lengths, out=offsets[1:])
            data = got[2]
            blobs = pa.Array.from_buffers(
                pa.binary(), len(found), [None, pa.py_buffer(offsets), pa.py_buffer(data)]
            )
            self.metrics.bytes_read += len(data)
            parts.append(b.codec.decode(found, blobs))
        table = pa.concat_tables(parts) if len(parts) > 1 else parts[0]
        self.metrics.rows_loaded += table.num_rows
        return table

    def read_expiring(self, upto_us: int) -> pa.Int64Array:
        if self.version == EMPTY_VERSION:
            return pa.array([], pa.int64())
        b = self._backend
        query = b._q(
            "SELECT coalesce(string_agg(int8send(key), ''::bytea), ''::bytea) FROM ("
            " SELECT key FROM {state} WHERE pid = %(pid)s AND valid_to IS NULL"
            "  AND expires_us < %(upto)s AND valid_from <= %(v)s"
            " UNION ALL"
            " SELECT key FROM {state} WHERE pid = %(pid)s AND valid_to > %(v)s"
            "  AND valid_from <= %(v)s AND expires_us < %(upto)s) k"
        )
        params = {"pid": self.pid, "upto": upto_us, "v": self.version}
        got = b._run(
            f"reading expiring keys of {self.job}/{self.partition}",
            lambda c: c.cursor(binary=True).execute(query, params).fetchone(),
        )
        self.metrics.round_trips += 1
        return pa.array(np.frombuffer(got[0], dtype=">i8").astype(np.int64))

    def write(self, version: int, puts: pa.Table, removes: pa.Int64Array, meta: dict) -> None:
        self._backend._commit(self, version, puts, removes, meta)


# ----- helpers -----------------------------------------------------------------------------


def _missing(job: str, partition: int, version: int, have: list[int]) -> str:
    span = f"restorable: {have[0]}..{have[-1]}" if have else "no version is committed"
    return (
        f"version {version} of state {job}/partition={partition} is not committed"
        f" or no longer retained ({span})"
    )


def _pg_array(keys: np.ndarray) -> str:
    """A bigint[] literal of `keys`, built by Arrow kernels (a text parameter is an order of
    magnitude cheaper than adapting a list of Python ints)."""
    if not len(keys):
        return "{}"
    as_text = pc.cast(pa.array(np.asarray(keys, dtype=np.int64)), pa.string())
    joined = pc.binary_join(pa.ListArray.from_arrays([0, len(as_text)], as_text), ",")
    return "{" + joined[0].as_py() + "}"


def _copy_chunks(pid: int, version: int, encoded) -> Iterator[bytes | memoryview]:
    """The binary COPY stream of the encoded keys, in pieces, built without a Python loop
    over keys: a fixed-size tuple prefix per key (numpy) joined element-wise with the
    blobs (Arrow)."""
    yield _COPY_HEADER
    at = 0
    for chunk in encoded.blobs.chunks:
        n = len(chunk)
        offsets = np.frombuffer(chunk.buffers()[1], dtype=np.int32)[chunk.offset :]
        lengths = np.diff(offsets[: n + 1])
        prefix = np.zeros(n, dtype=_COPY_PREFIX)
        prefix["nf"] = 6
        prefix["l1"] = prefix["l2"] = prefix["l3"] = prefix["l4"] = 8
        prefix["l5"] = 4
        prefix["pid"] = pid
        prefix["key"] = encoded.keys[at : at + n]
        prefix["vf"] = version
        prefix["exp"] = encoded.expiry[at : at + n]
        prefix["n"] = encoded.rows[at : at + n]
        prefix["l6"] = lengths
        width = _COPY_PREFIX.itemsize
        offsets = np.arange(n + 1, dtype=np.int32) * width
        heads = pa.Array.from_buffers(
            pa.binary(), n, [None, pa.py_buffer(offsets), pa.py_buffer(prefix.view(np.uint8))]
        )
        joined = pc.binary_join_element_wise(heads, chunk, pa.scalar(b"", pa.binary()))
        offs = np.frombuffer(joined.buffers()[1], dtype=np.int32)
        yield memoryview(joined.buffers()[2])[offs[0] : offs[n]]
        at += n
    yield _COPY_TRAILER
