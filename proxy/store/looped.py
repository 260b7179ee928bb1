"""PostgreSQL's hot statements sent from the event loop: a continuing turn's state read, its
record and its answer's record each leave in one pipeline, and their answers are awaited on the
loop, not on a worker thread (a thread hop costs more than the work, and at many clients the
thread and the loop take turns at the GIL).

The statements are those of the thread's way (`Direct`), collected by `Batch` while `work`
runs, then sent on psycopg's async connection in its pipeline mode (`AsyncConnection.pipeline`)
with BEGIN and COMMIT, each prepared by the server once per connection. Work that must read rows
before COMMIT, a statement that is not sent directly, no connection kept idle, or any failure (an
error, a connection found dead) raise `WouldWait`: the caller runs the work again on a thread,
the thread's way, which retries and reports as it always did. Only work that may run twice is
sent this way (pipelined.py's `idempotent`): a failure can come after COMMIT was sent."""

from __future__ import annotations

import asyncio
import select
import threading
from collections.abc import Callable
from typing import Any, TypeVar

from sqlalchemy import Engine

from proxy import offload
from proxy.store import direct
from proxy.store.direct import Prepared, Rows

T = TypeVar("T")
KEEP = 4  # connections kept for the loop (the pool's others serve the threads)
PREPARED_MAX = 256  # statements prepared per connection; past that they are parsed each time


class Batch:
    """`Direct`'s interface, collecting a transaction's statements instead of running them."""

    def __init__(self, dialect: Any) -> None:
        self.dialect = dialect
        self.sent: list[tuple[Prepared, dict[str, Any], Sent | None]] = []

    def execute(self, stmt: Any, params: Any = None) -> Rows:
        many = params if isinstance(params, list) else [params or {}]
        for one in many:
            prepared = self._prepared(stmt, one)
            if prepared.keys:  # its rows are read before COMMIT
                raise offload.WouldWait("a statement whose rows are read at once")
            self.sent.append((prepared, one, None))
        return Rows([])

    def send(self, stmt: Any, params: dict[str, Any]) -> Sent:
        sent = Sent(self._prepared(stmt, params))
        self.sent.append((sent.prepared, params, sent))
        return sent

    def driver(self, sql: str) -> None:
        raise offload.WouldWait("a statement for the driver")

    def begin_nested(self) -> Any:
        raise offload.WouldWait("a savepoint")

    def _prepared(self, stmt: Any, params: dict[str, Any]) -> Prepared:
        prepared = direct.prepare(stmt, self.dialect, tuple(params))
        if prepared is None:
            raise offload.WouldWait("a statement not sent directly")
        return prepared


class Answered:
    """An executor holding one query's rows, read already: any other statement would wait."""

    def __init__(self, dialect: Any, stmt: Any, params: dict[str, Any], rows: Rows) -> None:
        self.dialect = dialect
        self._stmt, self._params, self._rows = stmt, params, rows

    def execute(self, stmt: Any, params: Any = None) -> Rows:
        if stmt is not self._stmt or params != self._params:
            raise offload.WouldWait("a query not read yet")
        return self._rows

    def begin_nested(self) -> Any:
        raise offload.WouldWait("a savepoint")


class Sent:
    """A collected statement's rows (direct.Pending's interface), there once its batch ran."""

    def __init__(self, prepared: Prepared) -> None:
        self.prepared = prepared
        self._rows: Rows | None = None

    def rows(self) -> Rows:
        assert self._rows is not None, "read before its batch ran"
        return self._rows


class Loop:
    """Up to KEEP psycopg async connections to `engine`'s database, used from the event loop, one
    operation at a time each; made on the loop when none is idle (the operation meanwhile goes
    the thread's way)."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.idle: list[Any] = []  # psycopg.AsyncConnection
        self.made = 0  # connections kept, idle or in use, or being made
        self._counting = threading.Lock()  # `made` changes on the loop and at close
        self._making: set[asyncio.Task[None]] = set()

    async def transaction(self, work: Callable[[Batch], T], flush: bool = True) -> T:
        """Run `work`'s statements in one transaction, committed before this returns; without
        `flush` the commit does not wait for the server's disk (pipelined.transaction). `work`
        runs only once a connection is at hand."""
        conn = self._take()
        batch = Batch(self.engine.dialect)
        try:
            result = work(batch)
        except BaseException:
            self.idle.append(conn)
            raise
        head = ["BEGIN"] if flush else ["BEGIN", "SET LOCAL synchronous_commit = off"]
        await self._run(conn, batch, head, ["COMMIT"])
        return result

    async def read(self, stmt: Any, params: dict[str, Any]) -> Rows:
        """One query's rows, outside any transaction."""
        conn = self._take()
        batch = Batch(self.engine.dialect)
        try:
            sent = batch.send(stmt, params)
        except BaseException:
            self.idle.append(conn)
            raise
        await self._run(conn, batch, [], [])
        return sent.rows()

    async def _run(self, conn: Any, batch: Batch, head: list[str], tail: list[str]) -> None:
        task = asyncio.ensure_future(self._trip(conn, batch, head, tail))
        try:
            await asyncio.shield(task)
        except asyncio.CancelledError:
            while not task.done():  # what was sent may commit: wait for its end, as hop does
                try:
                    await asyncio.wait([task])
                except asyncio.CancelledError:
                    continue
            raise

    async def _trip(self, conn: Any, batch: Batch, head: list[str], tail: list[str]) -> None:
        try:
            cursors = []
            async with conn.pipeline():
                for sql in head:
                    await conn.execute(sql, prepare=False)
                for prepared, params, sent in batch.sent:
                    cursor = conn.cursor()
                    await cursor.execute(prepared.sql, prepared.values(params), prepare=True)
                    cursors.append((cursor, prepared, sent))
                for sql in tail:
                    await conn.execute(sql, prepare=False)
            for cursor, prepared, sent in cursors:  # as Direct converts its cursor's rows
                if sent is not None:
                    sent._rows = Rows(prepared.convert(await cursor.fetchall(), cursor.description))
        except Exception as exc:  # a failed statement, a lost connection: the thread's way
            self._drop(conn)
            raise offload.WouldWait(f"on the loop: {exc!r}") from exc
        except BaseException:
            self._drop(conn)
            raise
        self.idle.append(conn)

    def _take(self) -> Any:
        while self.idle:
            conn = self.idle.pop()
            if _usable(conn):
                return conn
            self._drop(conn)
        with self._counting:
            making = self.made < KEEP
            self.made += making
        if making:
            task = asyncio.ensure_future(self._make())
            self._making.add(task)
            task.add_done_callback(self._making.discard)
        raise offload.WouldWait("no connection kept for the loop yet")

    async def _make(self) -> None:
        import psycopg

        # The engine's own connect arguments: its adapters (JSON as the store encodes it) too.
        args, params = self.engine.dialect.create_connect_args(self.engine.url)
        try:
            conn = await psycopg.AsyncConnection.connect(*args, **params, autocommit=True)
        except BaseException:
            with self._counting:
                self.made -= 1
            raise
        conn.prepared_max = PREPARED_MAX
        self.idle.append(conn)

    def _drop(self, conn: Any) -> None:
        """Close a connection that failed or is dead: the server ends what it left open."""
        with self._counting:
            self.made -= 1
        conn.pgconn.finish()  # what AsyncConnection.close does, without awaiting: from anywhere

    def close(self) -> None:
        while self.idle:
            self._drop(self.idle.pop())


def _usable(conn: Any) -> bool:
    """Idle, in good shape, and not hung up on by the server (pipelined._hung_up)."""
    from psycopg import pq

    if conn.closed or conn.broken or conn.pgconn.status != pq.ConnStatus.OK:
        return False
    if conn.info.transaction_status != pq.TransactionStatus.IDLE:
        return False
    return not select.select([conn.fileno()], [], [], 0)[0]
