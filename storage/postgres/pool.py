"""Connections to the database, shared by the threads that use the engine.

A small pool of psycopg connections: :meth:`ConnectionPool.connection` lends one for a block
(taken from the idle ones, or opened while fewer than ``size`` exist, or else waited for) and
takes it back after. A connection that failed (the server went away, a broken socket) is
closed instead of returned, so the next user opens a fresh one: the engine recovers by itself
when the database comes back. Autocommit is on; multi-statement work uses
``conn.transaction()``. :func:`database_errors` turns psycopg's errors into OSErrors, which is
how the broker and the pipeline see them.
"""

from __future__ import annotations

import contextlib
import errno
import threading
from collections.abc import Iterator

import psycopg

CONNECT_TIMEOUT_S = 10


class DatabaseError(OSError):
    """The database could not do what was asked (unreachable, failed): an I/O error to the
    broker (KAFKA_STORAGE_ERROR, retriable for clients)."""


@contextlib.contextmanager
def database_errors() -> Iterator[None]:
    """psycopg's errors as :class:`DatabaseError`."""
    try:
        yield
    except psycopg.Error as e:
        raise DatabaseError(errno.EIO, f"database: {str(e).strip() or type(e).__name__}") from e


class ConnectionPool:
    def __init__(self, url: str, size: int = 8) -> None:
        self.url = url
        self.size = size
        self._idle: list[psycopg.Connection] = []
        self._open = 0
        self._cond = threading.Condition()
        self._closed = False

    @contextlib.contextmanager
    def connection(self) -> Iterator[psycopg.Connection]:
        conn = self._take()
        healthy = False
        try:
            yield conn
            healthy = not conn.closed and conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
        finally:
            self._give_back(conn, healthy)

    def _take(self) -> psycopg.Connection:
        with self._cond:
            while True:
                if self._closed:
                    raise psycopg.OperationalError("the connection pool is closed")
                if self._idle:
                    return self._idle.pop()
                if self._open < self.size:
                    self._open += 1
                    break
                self._cond.wait()
        try:
            return psycopg.connect(self.url, autocommit=True, connect_timeout=CONNECT_TIMEOUT_S)
        except BaseException:
            with self._cond:
                self._open -= 1
                self._cond.notify()
            raise

    def _give_back(self, conn: psycopg.Connection, healthy: bool) -> None:
        with self._cond:
            if healthy and not self._closed:
                self._idle.append(conn)
            else:
                self._open -= 1
                with contextlib.suppress(Exception):
                    conn.close()
            self._cond.notify()

    def close(self) -> None:
        with self._cond:
            self._closed = True
            idle, self._idle = self._idle, []
            self._open -= len(idle)
            self._cond.notify_all()
        for conn in idle:
            with contextlib.suppress(Exception):
                conn.close()
