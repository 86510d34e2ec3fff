"""The `postgresql` store's tables, and the binary COPY of new state rows.

Tables, in the PostgreSQL schema named by the URI (default `sessionize`)::

    partitions (pid, job, part)
        one row per (job, partition), giving it a number (`pid`) the other tables use
    versions (pid, version, meta, keys, bytes, committed_at)
        one row per committed version: it exists iff this row does; `meta` is the JSON the
        transaction committed, `keys` and `bytes` the size of the state at the version
    state (pid, key, valid_from, valid_to, expires_us, n_rows, data)
        a key's rows (`data`: `keyblobs` encoding of `n_rows` rows, `expires_us`: their
        earliest expiry) valid for versions valid_from <= v < valid_to (NULL: still current)
    job_records (job, version, record, written_at)
        the driver's commit log: `record` is the JSON of the job record
    job_settings (job, settings, written_at)
        the job's settings: `settings` is their JSON (the job records do not repeat them)
    fences (job, epoch)
        the newest lease epoch that fenced the job: every commit, job record and settings
        write of an older epoch is refused in its own transaction (the row is read FOR
        SHARE there, and raised with an UPDATE, so a commit and a takeover never interleave)

Indexes on `state`: current rows by expiry (`expiring`), ended rows by valid_to
(maintenance), rows by valid_from (truncation and re-commits).
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import psycopg
import pyarrow as pa
import pyarrow.compute as pc
from psycopg import sql

from sessionize.state.backends.keyblobs import Encoded
from sessionize.state.backends.postgres_pool import scalar

TABLES = ("partitions", "versions", "state", "job_records", "job_settings", "fences")

_COPY_HEADER = b"PGCOPY\n\xff\r\n\x00" + bytes(8)
_COPY_TRAILER = b"\xff\xff"
# One binary COPY tuple of (pid, key, valid_from, expires_us, n_rows, data) up to the bytes
# of `data`: the number of fields, then each field's byte length and value.
_COPY_PREFIX = np.dtype(
    [("fields", ">i2"), ("pid_size", ">i4"), ("pid", ">i8"), ("key_size", ">i4"),
     ("key", ">i8"), ("valid_from_size", ">i4"), ("valid_from", ">i8"),
     ("expires_size", ">i4"), ("expires_us", ">i8"), ("n_rows_size", ">i4"),
     ("n_rows", ">i4"), ("data_size", ">i4")]
)  # fmt: skip


def ddl(schema: str) -> list[sql.Composed]:
    """The statements that create the schema, its tables and indexes (if missing)."""
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
        """CREATE TABLE IF NOT EXISTS {s}.job_settings (
            job text PRIMARY KEY,
            settings json NOT NULL,
            written_at timestamptz NOT NULL DEFAULT now())""",
        """CREATE TABLE IF NOT EXISTS {s}.fences (
            job text PRIMARY KEY,
            epoch bigint NOT NULL)""",
    ]
    return [sql.SQL(q).format(s=s) for q in statements]


def in_schema(schema: str, query: str) -> sql.Composed:
    """`query` with {partitions}, {versions}, {state}, {job_records}, {job_settings},
    {fences} naming the tables of `schema`."""
    names = {n: sql.Identifier(schema, n) for n in TABLES if "{" + n + "}" in query}
    return sql.SQL(query).format(**names)


def fence_of(conn: psycopg.Connection, schema: str, job: str, *, lock: bool) -> int:
    """The job's fence (0: none); `lock` share-locks its row until the transaction ends, so
    that a takeover's `raise_fence` waits for the commit that read it."""
    query = "SELECT epoch FROM {fences} WHERE job = %s" + (" FOR SHARE" if lock else "")
    row = conn.execute(in_schema(schema, query), (job,)).fetchone()
    return 0 if row is None else row[0]


def raise_fence(conn: psycopg.Connection, schema: str, job: str, epoch: int) -> int:
    """Set the job's fence to max(fence, `epoch`) in one statement; the fence after."""
    query = in_schema(
        schema,
        "INSERT INTO {fences} AS f (job, epoch) VALUES (%s, %s) ON CONFLICT (job)"
        " DO UPDATE SET epoch = greatest(f.epoch, EXCLUDED.epoch) RETURNING epoch",
    )
    return int(scalar(conn.execute(query, (job, epoch))))


def pg_array(keys: np.ndarray) -> str:
    """A bigint[] literal of `keys`, built by Arrow kernels (a text parameter is an order of
    magnitude cheaper than adapting a list of Python ints)."""
    if not len(keys):
        return "{}"
    as_text = pc.cast(pa.array(np.asarray(keys, dtype=np.int64)), pa.string())
    joined = pc.binary_join(pa.ListArray.from_arrays([0, len(as_text)], as_text), ",")
    return "{" + str(joined[0].as_py()) + "}"


def copy_chunks(pid: int, version: int, encoded: Encoded) -> Iterator[bytes | memoryview]:
    """The binary COPY stream of the encoded keys as `state` rows valid from `version`, in
    pieces, built without a Python loop over keys: a fixed-size tuple prefix per key (numpy)
    joined element-wise with the blobs (Arrow)."""
    yield _COPY_HEADER
    at = 0
    for chunk in encoded.blobs.chunks:
        n = len(chunk)
        offsets = np.frombuffer(chunk.buffers()[1], dtype=np.int32)[chunk.offset :]
        prefix = np.zeros(n, dtype=_COPY_PREFIX)
        prefix["fields"] = 6
        for name in ("pid_size", "key_size", "valid_from_size", "expires_size"):
            prefix[name] = 8
        prefix["n_rows_size"] = 4
        prefix["pid"] = pid
        prefix["key"] = encoded.keys[at : at + n]
        prefix["valid_from"] = version
        prefix["expires_us"] = encoded.expiry[at : at + n]
        prefix["n_rows"] = encoded.rows[at : at + n]
        prefix["data_size"] = np.diff(offsets[: n + 1])
        width = _COPY_PREFIX.itemsize
        head_offsets = np.arange(n + 1, dtype=np.int32) * width
        heads = pa.Array.from_buffers(
            pa.binary(),
            n,
            [None, pa.py_buffer(head_offsets), pa.py_buffer(prefix.view(np.uint8))],
        )
        joined = pc.binary_join_element_wise(heads, chunk, pa.scalar(b"", pa.binary()))
        joined_offsets = np.frombuffer(joined.buffers()[1], dtype=np.int32)
        yield memoryview(joined.buffers()[2])[joined_offsets[0] : joined_offsets[n]]
        at += n
    yield _COPY_TRAILER
