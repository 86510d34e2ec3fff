"""Idle PostgreSQL connections kept per worker process, for the `postgresql` store."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from typing import TypeVar

import psycopg

T = TypeVar("T")

MAX_IDLE = 8


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
        """`work(conn)` on a pooled connection. A connection idle in the pool may have died
        with a server restart: then the idle ones are dropped and `work` (which must be one
        idempotent transaction) is retried once on a new connection. psycopg's errors pass
        through: each caller words them for its own component."""
        for attempt in (1, 2):
            conn, was_idle = self.get()
            try:
                result = work(conn)
            except psycopg.Error as e:
                conn.close()
                lost = isinstance(e, psycopg.OperationalError | psycopg.InterfaceError)
                if attempt == 1 and was_idle and lost:
                    self.clear()
                    continue
                raise
            except BaseException:
                conn.close()
                raise
            self.put(conn)
            return result
        raise AssertionError("unreachable")

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
