"""Engines that behave the same on SQLite and PostgreSQL: pragmas, write transactions, retries."""

from __future__ import annotations

import collections
import contextlib
import json
import logging
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar, cast

import orjson
from sqlalchemy import Connection, Engine, Table, bindparam, create_engine, event, insert
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DBAPIError, IntegrityError, OperationalError
from sqlalchemy.orm import Session
from sqlalchemy.pool import StaticPool

from proxy import offload
from proxy.store import direct, looped, pipelined
from proxy.store.held import Held

log = logging.getLogger("ctxproxy.store")

T = TypeVar("T")

BUSY_TIMEOUT_MS = 30_000
RETRIES = 8
CHECKPOINT_EVERY = 64  # SQLite: write transactions between two WAL checkpoints (Writer.tidy)
# PostgreSQL: serialization failure, deadlock. Both mean "run the transaction again".
RETRY_SQLSTATES = {"40001", "40P01"}


class DriverMissing(Exception):
    """The database URL names a driver that is not installed; the message says what to install."""


# What to install for each driver a URL can name; the rest get the driver's own module name.
DRIVER_PACKAGES = {"psycopg": "pip install 'ctxproxy[postgres]'"}


def make_engine(url: str) -> Engine:
    parsed = make_url(url)
    if parsed.get_backend_name() != "sqlite":
        try:
            # No pre-ping: a dead connection is retried instead. The pool's usual 5 besides those
            # kept for the event loop's statements (looped.py): an overflow connection is closed
            # after each use, and a thread's transaction would open one each time.
            engine = create_engine(
                parsed,
                pool_size=5 + looped.KEEP,
                json_serializer=json_text,
                json_deserializer=json_value,
            )
        except ImportError as exc:  # the dialect imports its driver when the engine is built
            raise _driver_missing(parsed.drivername, exc) from None
        if engine.dialect.name == "postgresql":
            pipelined.sync_on_rows(engine)
        return engine
    in_memory = parsed.database in (None, "", ":memory:")
    engine = create_engine(
        parsed,
        connect_args={"timeout": BUSY_TIMEOUT_MS / 1000, "check_same_thread": False},
        poolclass=StaticPool if in_memory else None,
        json_serializer=json_text,
        json_deserializer=json_value,
    )
    _tune_sqlite(engine)
    return engine


def json_text(value: Any) -> str:
    """A JSON column's text: orjson, several times faster than the standard encoder on a
    request's parameters (an agent's tool definitions are tens of KB every turn); what orjson
    refuses (integers past 64 bits, keys that are not strings) takes the standard encoder.
    A NaN or Infinity, which no request holds (the parser refuses them) but an upstream's answer
    might, is stored as null: JSON has no such number, and PostgreSQL refuses one."""
    try:
        return orjson.dumps(value).decode()
    except (orjson.JSONEncodeError, TypeError):
        return json.dumps(value)


def json_value(text: str | bytes) -> Any:
    """A JSON column's value: orjson (a session's stored view state is read every turn); what
    it refuses (integers past 64 bits, written by json_text's fallback) the standard parser."""
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        return json.loads(text)


def _driver_missing(drivername: str, exc: ImportError) -> DriverMissing:
    driver = drivername.partition("+")[2] or (exc.name or drivername)
    hint = DRIVER_PACKAGES.get(driver, f"install the Python package for '{driver}'")
    return DriverMissing(f"database_url needs the {driver} driver, which is not installed: {hint}")


def _tune_sqlite(engine: Engine) -> None:
    @event.listens_for(engine, "connect")
    def _connect(dbapi_conn: Any, record: Any) -> None:
        # Let SQLAlchemy, not pysqlite, emit BEGIN, so writers can ask for BEGIN IMMEDIATE.
        dbapi_conn.isolation_level = None
        cur = dbapi_conn.cursor()
        cur.execute("PRAGMA journal_mode=WAL")
        # In WAL mode NORMAL survives a process crash; only a power cut can cost the last commit.
        cur.execute("PRAGMA synchronous=NORMAL")
        cur.execute("PRAGMA foreign_keys=ON")
        cur.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
        # SQLite's own checkpoint runs in the commit that fills 1,000 WAL pages, syncing to disk
        # while this process's write lock is held: every write waits behind it, and the mean
        # commit is many times its median. Writer.tidy checkpoints off the lock.
        cur.execute("PRAGMA wal_autocheckpoint=0")
        cur.close()

    @event.listens_for(engine, "begin")
    def _begin(conn: Any) -> None:
        # A deferred transaction that reads and then writes fails at once with "database is
        # locked" when another connection wrote in between; IMMEDIATE takes the lock up front
        # and waits busy_timeout for it instead.
        if conn.connection.dbapi_connection.in_transaction:  # begun on the driver (pipelined.py)
            return
        write = conn.get_execution_options().get("ctxproxy_write", False)
        conn.exec_driver_sql("BEGIN IMMEDIATE" if write else "BEGIN")


class FairLock:
    """A lock taken in the order it was asked for: a writer storing a long history in several
    transactions cannot retake it ahead of a request that has been waiting."""

    def __init__(self) -> None:
        self._guard = threading.Lock()
        self._waiting: collections.deque[threading.Lock] = collections.deque()
        self._held = False

    def __enter__(self) -> None:
        with self._guard:
            if not self._held:
                self._held = True
                return
            turn = threading.Lock()
            turn.acquire()
            self._waiting.append(turn)
        turn.acquire()  # released by the holder that hands the lock over

    def contended(self) -> bool:
        """Whether someone is waiting for the lock (read by its holder)."""
        return bool(self._waiting)

    def acquire_now(self) -> bool:
        """Take the lock if no one holds it; never wait."""
        with self._guard:
            if self._held:
                return False
            self._held = True
            return True

    def __exit__(self, *exc: object) -> None:
        with self._guard:
            if self._waiting:
                self._waiting.popleft().release()  # still held: now by the next in line
            else:
                self._held = False


class Writer:
    """Runs write transactions: serialised in-process on SQLite, retried on races anywhere."""

    def __init__(self, engine: Engine):
        self.engine = engine.execution_options(ctxproxy_write=True)
        sqlite_db = engine.dialect.name == "sqlite"
        self._lock: contextlib.AbstractContextManager[Any] = (
            FairLock() if sqlite_db else contextlib.nullcontext()
        )
        self._sqlite = sqlite_db
        # SQLite: the hot path's write connection, kept (writes take turns under the lock)
        self.held = Held(self.engine, keep=1) if sqlite_db else None
        self._commits = 0  # since the last checkpoint (SQLite)

    def tidy(self) -> None:
        """SQLite: every CHECKPOINT_EVERY writes, copy the WAL into the database, without
        holding the write lock (a passive checkpoint waits for no one, and no one for it). Run
        by a write whose caller waits for nothing: an exchange's finish."""
        if not self._sqlite or self._commits < CHECKPOINT_EVERY:
            return
        self._commits = 0
        if offload.on_loop():  # it writes the database file and syncs it: not on the loop
            offload.soon(self._checkpoint)
        else:
            self._checkpoint()

    def _checkpoint(self) -> None:
        raw = self.engine.raw_connection()
        try:
            raw.cursor().execute("PRAGMA wal_checkpoint(PASSIVE)").close()
        finally:
            raw.close()

    def contended(self) -> bool:
        """Whether another write is waiting for this process's lock (SQLite only)."""
        return isinstance(self._lock, FairLock) and self._lock.contended()

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        """This process's write lock; on the event loop taken only if free (else WouldWait)."""
        lock = self._lock
        if not (isinstance(lock, FairLock) and offload.on_loop()):
            with lock:
                yield
            return
        if not lock.acquire_now():
            raise offload.WouldWait("another thread holds the write lock")
        try:
            yield
        finally:
            lock.__exit__()

    def run(self, work: Callable[[Session], T]) -> T:
        redone = False  # one more run for a connection found dead before COMMIT was sent
        for attempt in range(RETRIES):
            sent = False
            try:
                with self.locked(), Session(self.engine, expire_on_commit=False) as s:
                    s.begin()
                    result = work(s)
                    sent = True
                    s.commit()
                    self._commits += 1
                    return result
            except (IntegrityError, OperationalError) as exc:
                if exc.connection_invalidated and not (sent or redone):
                    redone = True
                    continue
                if attempt == RETRIES - 1 or not _retryable(exc):
                    raise
                _pause(exc, attempt)
        raise AssertionError("unreachable")

    def run_core(
        self, work: Callable[[direct.Direct], T], idempotent: bool = False, flush: bool = True
    ) -> T:
        """One write transaction of Core statements: what the hot path uses, without the ORM's
        unit of work (a third of a request's time when it ran through a Session). On
        PostgreSQL its statements are pipelined: only those whose rows are read wait.
        `idempotent`, `flush`: see pipelined.transaction."""
        for attempt in range(RETRIES):
            try:
                with self.locked():
                    if self.held is not None:  # SQLite (flush: its own synchronous setting)
                        with self.held.connect() as conn:
                            result = pipelined.on_sqlite(conn, work, [])
                    else:
                        result = pipelined.transaction(self.engine, work, idempotent, flush)
                    self._commits += 1
                    return result
            except (IntegrityError, OperationalError) as exc:
                if attempt == RETRIES - 1 or not _retryable(exc):
                    raise
                _pause(exc, attempt)
        raise AssertionError("unreachable")


def _pause(exc: DBAPIError, attempt: int) -> None:
    """Before a write's next try (it was rolled back): a while, or on the loop, a thread's."""
    if offload.on_loop():
        raise offload.WouldWait("a write to retry") from exc
    log.info("store: retrying a write after %s", type(exc.orig).__name__)
    time.sleep(0.01 * 2**attempt)


def _retryable(exc: DBAPIError) -> bool:
    state = getattr(exc.orig, "sqlstate", None)
    if isinstance(exc, IntegrityError):
        # A concurrent writer inserted the same session, seq or entry first (unique), or
        # deleted a session whose last reference to a message we were about to reuse (FK).
        return state in ("23505", "23503") or "UNIQUE constraint failed" in str(exc.orig)
    if state in RETRY_SQLSTATES:
        return True
    return "database is locked" in str(exc.orig)  # another process held SQLite's lock too long


def _table(model: type[Any]) -> Table:
    return cast(Table, model.__table__)


# What the statement helpers run on (a Batch collects them, to be sent from the loop).
Executor = Session | Connection | direct.Direct | looped.Batch | looped.Answered


def dialect_of(s: Executor) -> str:
    return s.get_bind().dialect.name if isinstance(s, Session) else s.dialect.name


_STATEMENTS: dict[tuple[str, str, str], Any] = {}


def statement(kind: str, table: Table, dialect: str, build: Callable[[], Any]) -> Any:
    """A statement built once per table and dialect: building one costs more than running it."""
    key = (kind, table.name, dialect)
    found = _STATEMENTS.get(key)
    if found is None:
        found = _STATEMENTS[key] = direct.reusable(build())
    return found


def _upsert_module(name: str) -> Any:
    return sqlite if name == "sqlite" else postgresql


def insert_ignore(s: Executor, model: type[Any], rows: Sequence[dict[str, Any]]) -> None:
    """INSERT rows, skipping any whose unique key already exists (portable insert-or-ignore)."""
    if not rows:
        return
    table = _table(model)
    name = dialect_of(s)
    if name in ("sqlite", "postgresql"):
        upsert = _upsert_module(name)
        # inline(): no RETURNING of a new row's id, which nothing reads (and on PostgreSQL
        # a statement returning rows waits for its answer, see pipelined.sync_on_rows).
        build = lambda: upsert.insert(table).on_conflict_do_nothing().inline()  # noqa: E731
        stmt = statement("ignore", table, name, build)
        s.execute(stmt, list(rows))
        return
    for row in rows:  # any other backend: one savepoint per row
        try:
            with s.begin_nested():
                s.execute(insert(table), row)
        except IntegrityError:
            pass


def insert_ignore_returning(s: Executor, model: type[Any], row: dict[str, Any]) -> int | None:
    """Insert one row and return its id, or None if its unique key already existed."""
    table = _table(model)
    name = dialect_of(s)
    if name in ("sqlite", "postgresql"):
        stmt = statement(
            "ignore-returning",
            table,
            name,
            lambda: (
                _upsert_module(name).insert(table).on_conflict_do_nothing().returning(table.c.id)
            ),
        )
        return s.execute(stmt, row).scalar_one_or_none()
    try:
        with s.begin_nested():
            return s.execute(insert(table).values(row).returning(table.c.id)).scalar_one()
    except IntegrityError:
        return None


def one_of(column: Any, name: str, n: int) -> Any:
    """`column IN (:name0, …, :name{n-1})`: a statement built for one list length runs without
    the per-execution rendering an expanding IN costs (a fifth of a millisecond a query)."""
    return column.in_([bindparam(f"{name}{i}") for i in range(n)])


def listed(name: str, values: Sequence[Any]) -> dict[str, Any]:
    """The parameters `one_of(…, name, len(values))` takes."""
    return {f"{name}{i}": v for i, v in enumerate(values)}
