"""Write transactions in few round trips: psycopg's pipeline mode on PostgreSQL, and one retry
on a connection found dead before anything was committed (instead of a ping per checkout)."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

from sqlalchemy import Connection, Engine, event
from sqlalchemy.exc import DBAPIError

log = logging.getLogger("ctxproxy.store")
T = TypeVar("T")
PIPELINE = "ctxproxy_pipeline"  # key in a pooled connection's info: its open pipeline


def transaction(engine: Engine, work: Callable[[Connection], T]) -> T:
    """Run `work` in one transaction and commit it. A connection that turns out dead is
    replaced once, but only when the failure came before COMMIT was sent: the server then
    rolled the transaction back, so running it again cannot write anything twice."""
    for attempt in (0, 1):
        committing = False
        try:
            with engine.connect() as conn, _pipeline(conn), conn.begin() as trans:
                result = work(conn)
                committing = True
                trans.commit()  # a failure here is never retried: the commit may have landed
                return result
        except DBAPIError as exc:
            if committing or attempt or not exc.connection_invalidated:
                raise
            log.info("store: a pooled connection was dead; retrying on a new one")
    raise AssertionError("unreachable")


def read(engine: Engine, query: Callable[[Connection], T]) -> T:
    """Run a read, retried once on a connection found dead (a read writes nothing)."""
    for attempt in (0, 1):
        try:
            with engine.connect() as conn:
                return query(conn)
        except DBAPIError as exc:
            if not (exc.connection_invalidated and attempt == 0):
                raise
            log.info("store: a pooled connection was dead; retrying on a new one")
    raise AssertionError("unreachable")


@contextlib.contextmanager
def _pipeline(conn: Connection) -> Iterator[None]:
    raw = conn.connection.dbapi_connection
    if conn.dialect.name != "postgresql" or raw is None or not hasattr(raw, "pipeline"):
        yield
        return
    with raw.pipeline() as pipeline:
        conn.info[PIPELINE] = pipeline
        try:
            yield
        finally:
            conn.info.pop(PIPELINE, None)


def sync_on_rows(engine: Engine) -> None:
    """In a pipeline, a statement is only sent; SQLAlchemy reads its result's shape at once,
    so a statement that returns rows is synced right away. The others (INSERTs, UPDATEs
    without RETURNING) travel with the next one that must wait: their errors surface there,
    or at COMMIT, inside the same transaction."""

    @event.listens_for(engine, "after_cursor_execute")
    def _sync(conn: Any, cursor: Any, statement: str, params: Any, ctx: Any, many: bool) -> None:
        pipeline = conn.info.get(PIPELINE)
        if pipeline is not None and _returns_rows(statement):
            pipeline.sync()


def _returns_rows(statement: str) -> bool:
    head = statement.lstrip()[:6].upper()
    return head in ("SELECT", "WITH") or "RETURNING" in statement
