"""A partition of the PostgreSQL store at one version (`postgres.py`): reads are SQL queries
on the rows valid at that version, many keys a query."""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

import numpy as np
import psycopg
import pyarrow as pa
from psycopg import sql

from sessionize.state.backends.postgres_layout import pg_array
from sessionize.state.stored import StoredVersion

if TYPE_CHECKING:
    from sessionize.state.backends.postgres import PostgresBackend

# Keys read by one query: bounds the size of a query's array and of its reply.
KEYS_PER_QUERY = 20_000


class PostgresVersion(StoredVersion):
    """A partition at a version: reads are SQL queries on the rows valid at that version."""

    def __init__(
        self,
        backend: PostgresBackend,
        job: str,
        partition: int,
        version: int,
        meta: dict[str, Any],
        pid: int | None,
        keys: int,
        nbytes: int,
    ):
        super().__init__(backend, job, partition, version, meta)
        self.backend: PostgresBackend = backend
        self.pid = pid
        self.metrics.keys = keys
        self.metrics.bytes = nbytes

    def _read_rows(self, keys: pa.Int64Array) -> pa.Table:
        backend = self.backend
        query = backend._sql(
            "SELECT coalesce(string_agg(int8send(key), ''::bytea), ''::bytea),"
            " coalesce(string_agg(int4send(octet_length(data)), ''::bytea), ''::bytea),"
            " coalesce(string_agg(data, ''::bytea), ''::bytea)"
            " FROM {state} WHERE pid = %s AND key = ANY(%s::bigint[])"
            " AND valid_from <= %s AND (valid_to IS NULL OR valid_to > %s)"
        )
        version = self.version
        parts = []
        for lo in range(0, len(keys), KEYS_PER_QUERY):
            chunk = keys.slice(lo, KEYS_PER_QUERY).to_numpy()
            params = (self.pid, pg_array(chunk), version, version)
            got = backend._run(
                f"reading {len(chunk)} keys of {self.job}/{self.partition} at version {version}",
                functools.partial(_binary_row, query=query, params=params),
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
            parts.append(backend.codec.decode(found, blobs))
        table = pa.concat_tables(parts) if len(parts) > 1 else parts[0]
        self.metrics.rows_loaded += table.num_rows
        return table

    def _read_expiring(self, upto_us: int) -> pa.Int64Array:
        backend = self.backend
        query = backend._sql(
            "SELECT coalesce(string_agg(int8send(key), ''::bytea), ''::bytea) FROM ("
            " SELECT key FROM {state} WHERE pid = %(pid)s AND valid_to IS NULL"
            "  AND expires_us < %(upto)s AND valid_from <= %(v)s"
            " UNION ALL"
            " SELECT key FROM {state} WHERE pid = %(pid)s AND valid_to > %(v)s"
            "  AND valid_from <= %(v)s AND expires_us < %(upto)s) k"
        )
        params = {"pid": self.pid, "upto": upto_us, "v": self.version}
        got = backend._run(
            f"reading expiring keys of {self.job}/{self.partition}",
            functools.partial(_binary_row, query=query, params=params),
        )
        self.metrics.round_trips += 1
        return pa.array(np.frombuffer(got[0], dtype=">i8").astype(np.int64))


def _binary_row(conn: psycopg.Connection, *, query: sql.Composed, params: Any) -> tuple[Any, ...]:
    """The one row of an aggregate query, its values in binary."""
    row = conn.cursor(binary=True).execute(query, params).fetchone()
    assert row is not None  # an aggregate: one row
    return row
