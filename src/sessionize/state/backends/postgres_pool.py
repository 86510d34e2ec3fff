"""Idle PostgreSQL connections kept per worker process, for the `postgresql` store."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

import psycopg

T = TypeVar("T")

MAX_IDLE = 8
ROLLBACK_RETRIES = 3  # a deadlock's victim runs again; each new worker creates tables once
# What the server rolls back for another transaction's sake: running it again is the remedy.
ROLLED_BACK = (psycopg.errors.DeadlockDetected, psycopg.errors.SerializationFailure)


class ConnectionPool:
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

    def run(self, work: Callable[[psycopg.Connection], T]) -> T:
        """`work(conn)` on a pooled connection; `work` must be one idempotent transaction.
        A connection idle in the pool may have died with a server restart: then the idle
        ones are dropped and `work` is retried once on a new connection. A transaction the
        server rolled back to break a deadlock (two workers creating and writing the same
        tables in different orders) or for a serialization failure is run again, up to
        ROLLBACK_RETRIES times. psycopg's other errors pass through: each caller words them
        for its own component."""
        reconnected, rollbacks = False, 0
        while True:
            conn, was_idle = self.get()
            try:
                result = work(conn)
            except ROLLED_BACK:
                conn.close()
                if rollbacks == ROLLBACK_RETRIES:
                    raise
                rollbacks += 1
                time.sleep(0.05 * rollbacks)
                continue
            except psycopg.Error as e:
                conn.close()
                lost = isinstance(e, psycopg.OperationalError | psycopg.InterfaceError)
                if not reconnected and was_idle and lost:
                    reconnected = True
                    self.clear()
                    continue
                raise
            except BaseException:
                conn.close()
                raise
            self.put(conn)
            return result

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
            if len(self._idle) < MAX_IDLE:
                self._idle.append(conn)
                return
        conn.close()


_POOLS: dict[str, ConnectionPool] = {}
_POOLS_LOCK = threading.Lock()
_INHERITED: list[ConnectionPool] = []  # a parent process's pools, kept alive after fork


def pool_for(conninfo: str) -> ConnectionPool:
    """The pool of `conninfo` in this process."""
    with _POOLS_LOCK:
        pool = _POOLS.get(conninfo)
        if pool is not None and pool.owner != os.getpid():
            _INHERITED.append(pool)
            pool = None
        if pool is None:
            pool = _POOLS[conninfo] = ConnectionPool(conninfo)
        return pool


def scalar(cursor: psycopg.Cursor[Any]) -> Any:
    """The first value of a query's one row (`SELECT EXISTS ...`, `count(*)`, ...)."""
    row = cursor.fetchone()
    assert row is not None, "a query that always returns one row"
    return row[0]
