"""Write transactions in few round trips: psycopg's pipeline mode on PostgreSQL, and one retry
on a connection found dead before anything was committed (instead of a ping per checkout)."""

from __future__ import annotations

import logging
import select
from collections.abc import Callable
from typing import Any, TypeVar

from sqlalchemy import Connection, Engine, event
from sqlalchemy.engine import ExecutionContext
from sqlalchemy.exc import DBAPIError
from sqlalchemy.pool import PoolProxiedConnection

from proxy.store.direct import Direct

log = logging.getLogger("ctxproxy.store")
T = TypeVar("T")
PIPELINE = "ctxproxy_pipeline"  # key in a pooled connection's info: its open pipeline


def transaction(
    engine: Engine, work: Callable[[Direct], T], idempotent: bool = False, flush: bool = True
) -> T:
    """Run `work` in one transaction and commit it. A connection that turns out dead is
    replaced once, but only when the failure came before COMMIT was sent: the server then
    rolled the transaction back, so running it again cannot write anything twice. Work that
    is `idempotent` (run twice, it leaves what running it once does) is run again even when
    the COMMIT was sent, as a pipeline whose first wait is for it finds the connection dead
    only then. Without `flush`, PostgreSQL answers the COMMIT before its WAL reaches the disk
    (synchronous_commit off, for this transaction only): what it wrote is kept if this process
    dies, and is on disk once a later commit that flushes is, as the WAL is flushed in order;
    only a crash of the database server or its machine within a few wal_writer_delay can lose
    it (SQLite in WAL mode at synchronous=NORMAL loses the last commits to a power cut)."""
    for attempt in (0, 1):
        sent: list[bool] = []  # holds True once COMMIT is on its way
        try:
            with engine.connect() as conn:
                if _can_pipeline(conn):
                    return _pipelined(conn, work, sent, flush)
                if conn.dialect.name == "sqlite":
                    return on_sqlite(conn, work, sent)
                with conn.begin() as trans:
                    result = work(Direct(conn))
                    sent.append(True)
                    trans.commit()
                    return result
        except DBAPIError as exc:
            if (sent and not idempotent) or attempt or not exc.connection_invalidated:
                raise
            log.info("store: a pooled connection was dead; retrying on a new one")
    raise AssertionError("unreachable")


def on_sqlite(conn: Connection, work: Callable[[Direct], T], sent: list[bool]) -> T:
    """BEGIN IMMEDIATE and COMMIT straight to the driver, as the statements go: SQLAlchemy's
    own transaction cost more than the statements. A statement that still goes through
    SQLAlchemy joins this transaction (engine.py's begin hook sees it open)."""
    direct = Direct(conn)
    direct.driver("BEGIN IMMEDIATE")
    try:
        result = work(direct)
        sent.append(True)
        direct.driver("COMMIT")
    except BaseException:
        if direct.raw.in_transaction:
            direct.raw.execute("ROLLBACK")
        raise
    return result


def _can_pipeline(conn: Connection) -> bool:
    raw = conn.connection.dbapi_connection
    return conn.dialect.name == "postgresql" and hasattr(raw, "pipeline")


def _pipelined(
    conn: Connection, work: Callable[[Direct], T], sent: list[bool], flush: bool = True
) -> T:
    """BEGIN travels with the first statement that must wait; the rest and COMMIT leave
    together at the pipeline's end, one round trip. psycopg would sync after a BEGIN of its
    own, so the connection is in autocommit mode and the transaction is spelled out."""
    import psycopg

    conn = conn.execution_options(isolation_level="AUTOCOMMIT")
    fairy = conn.connection
    raw: Any = fairy.dbapi_connection
    if _hung_up(raw):  # found before anything is sent: the caller retries on a new connection
        exc = psycopg.OperationalError("the server closed this pooled connection")
        _invalidate_pool(conn, fairy, exc)
        raise DBAPIError.instance(
            None, None, exc, psycopg.Error, connection_invalidated=True, dialect=conn.dialect
        )
    try:
        with raw.pipeline() as pipeline:
            fairy.info[PIPELINE] = pipeline
            # BEGIN and COMMIT straight to the driver: SQLAlchemy has nothing to add to them
            # (it sees an autocommit connection) but its cost per statement.
            raw.execute("BEGIN")
            if not flush:
                raw.execute("SET LOCAL synchronous_commit = off")
            result = work(Direct(conn))
            raw.execute("COMMIT")
            sent.append(True)
    except DBAPIError as exc:
        # A lost connection shows as broken only once the pipeline has ended.
        if (raw.closed or raw.broken) and not exc.connection_invalidated:
            exc.connection_invalidated = True
            _invalidate_pool(conn, fairy, exc)
        raise
    except psycopg.Error as exc:  # raised by the final sync: in SQLAlchemy's terms, as the rest
        lost = raw.closed or raw.broken
        if lost:
            _invalidate_pool(conn, fairy, exc)
        raise DBAPIError.instance(
            None, None, exc, psycopg.Error, connection_invalidated=lost, dialect=conn.dialect
        ) from exc
    finally:
        fairy.info.pop(PIPELINE, None)
        idle = psycopg.pq.TransactionStatus.IDLE
        if not (raw.closed or raw.broken) and raw.info.transaction_status != idle:
            raw.execute("ROLLBACK")  # a statement failed: the server still holds the block
    return result


def _hung_up(raw: Any) -> bool:
    """Whether the server closed this idle connection (a restart, an idle timeout, a
    terminated backend): it then sent its last words, so there is something to read. A
    pipeline that reads nothing before COMMIT would otherwise find it dead only once COMMIT
    was sent, too late to know whether to run the work again. No round trip: a poll."""
    return bool(select.select([raw.fileno()], [], [], 0)[0])


def _invalidate_pool(conn: Connection, fairy: PoolProxiedConnection, exc: BaseException) -> None:
    """As SQLAlchemy does on a disconnect it detects: the server likely dropped every pooled
    connection (a restart), so this one is closed and the pool replaced (Engine.dispose without
    closing what other threads have checked out: theirs are closed as they are returned)."""
    fairy.invalidate(exc)
    conn.engine.dispose(close=False)


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


def sync_on_rows(engine: Engine) -> None:
    """In a pipeline, a statement is only sent; SQLAlchemy reads its result's shape at once,
    so a statement that returns rows is synced right away. The others (INSERTs, UPDATEs
    without RETURNING) travel with the next one that must wait: their errors surface there,
    or at COMMIT, inside the same transaction."""

    @event.listens_for(engine, "after_cursor_execute")
    def _sync(conn: Any, cursor: Any, statement: str, params: Any, ctx: Any, many: bool) -> None:
        pipeline = conn.info.get(PIPELINE)
        if pipeline is not None and _returns_rows(ctx):
            pipeline.sync()


def _returns_rows(ctx: ExecutionContext | None) -> bool:
    """A SELECT, or a DML statement with RETURNING (its exported columns); a statement SQLAlchemy
    did not compile (text for the driver) is taken to return rows."""
    compiled = ctx.compiled if ctx is not None else None
    if compiled is None or compiled.statement is None:
        return True
    return bool(getattr(compiled.statement, "exported_columns", True))
