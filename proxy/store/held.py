"""SQLite connections kept checked out between a turn's store calls: a pool checkout and return
(SQLAlchemy's Connection, the pool's reset on return) cost more than a state read's query."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy import Connection, Engine
from sqlalchemy.pool import Pool


class Held:
    """Up to `keep` idle connections of `engine`, reused by whichever thread asks next."""

    def __init__(self, engine: Engine, keep: int) -> None:
        self.engine, self.keep = engine, keep
        self.idle: list[tuple[Connection, Pool]] = []  # list.pop/append: atomic under the GIL

    @contextmanager
    def connect(self) -> Iterator[Connection]:
        """A connection; kept for the next caller when the work ended well."""
        conn = self._take()
        pool = self.engine.pool
        try:
            yield conn
        except BaseException:
            conn.close()
            raise
        if conn.in_transaction():  # a statement through SQLAlchemy began one: end it
            conn.rollback()
        if conn.invalidated or len(self.idle) >= self.keep:
            conn.close()
        else:
            self.idle.append((conn, pool))

    def _take(self) -> Connection:
        while self.idle:
            conn, pool = self.idle.pop()
            if pool is self.engine.pool and not conn.closed:
                return conn
            conn.close()  # the engine was disposed since: its connections are replaced
        return self.engine.connect()

    def close(self) -> None:
        while self.idle:
            self.idle.pop()[0].close()
