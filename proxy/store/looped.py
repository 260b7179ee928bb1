"""PostgreSQL's hot statements sent from the event loop: a continuing turn's state read, its
record and its answer's record each leave in one write to the socket, and their answers are
waited for on the loop's selector, not on a worker thread (a thread hop costs more than the
work, and at many clients the thread and the loop take turns at the GIL).

The statements are those of the thread's way (`Direct`), collected by `Batch` while `work`
runs, then sent in libpq's pipeline mode with BEGIN, COMMIT and one sync, the server preparing
each once per connection. Work that must read rows before COMMIT, a statement that is not sent
directly, no connection kept idle, or any failure (an error, a connection found dead) raise
`WouldWait`: the caller runs the work again on a thread, the thread's way, which retries and
reports as it always did. Only work that may run twice is sent this way (pipelined.py's
`idempotent`): a failure can come after COMMIT was sent."""

from __future__ import annotations

import asyncio
import select
import threading
from collections.abc import Callable
from typing import Any, TypeVar

from sqlalchemy import Connection, Engine

from proxy import offload
from proxy.store import direct
from proxy.store.direct import Prepared, Rows

T = TypeVar("T")
KEEP = 4  # connections kept for the loop (the pool's others serve the threads)
PREPARED = "ctxproxy_prepared"  # key in a kept connection's info: its prepared statements' names
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
    """Up to KEEP connections of `engine` used from the event loop, one operation at a time
    each; made on a thread when none is idle (the operation meanwhile goes the thread's way)."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.idle: list[Connection] = []
        self.made = 0  # connections kept, idle or in use, or being made
        self._counting = threading.Lock()  # `made` changes on the loop and on worker threads

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
        head = [b"BEGIN"] if flush else [b"BEGIN", b"SET LOCAL synchronous_commit = off"]
        await self._run(conn, batch, head, [b"COMMIT"])
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

    async def _run(
        self, conn: Connection, batch: Batch, head: list[bytes], tail: list[bytes]
    ) -> None:
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

    async def _trip(
        self, conn: Connection, batch: Batch, head: list[bytes], tail: list[bytes]
    ) -> None:
        raw: Any = conn.connection.dbapi_connection
        try:
            results = await _pipeline(raw, self._commands(conn, batch, head, tail))
            _fill(raw, batch, results[len(head) :])
        except Exception as exc:  # a failed statement, a lost connection: the thread's way
            self._drop(conn)
            raise offload.WouldWait(f"on the loop: {exc!r}") from exc
        except BaseException:
            self._drop(conn)
            raise
        self.idle.append(conn)

    def _commands(
        self, conn: Connection, batch: Batch, head: list[bytes], tail: list[bytes]
    ) -> list[Callable[[Any], int]]:
        """Each statement as a call sending it (returning how many results it yields)."""
        # psycopg's own binding of a cursor's parameters: private (pinned in pyproject.toml,
        # tests/unit/test_library_seams.py names it). Its public pipeline (AsyncConnection's)
        # flushes each statement as it is queued, through its async machinery: measured, more
        # CPU a turn than these calls sending the batch in one write (see the commit).
        from psycopg._queries import PostgresQuery
        from psycopg.adapt import Transformer

        raw: Any = conn.connection.dbapi_connection
        # The statements this connection prepared, kept with it (the pool's per-connection info).
        known = conn.connection.info.setdefault(PREPARED, {})
        sends: list[Callable[[Any], int]] = [_plain(sql) for sql in head]
        for prepared, params, _ in batch.sent:
            query = PostgresQuery(Transformer(raw))
            query.convert(prepared.sql, prepared.values(params))
            sends.append(_statement(query, known))
        sends.extend(_plain(sql) for sql in tail)
        return sends

    def _take(self) -> Connection:
        while self.idle:
            conn = self.idle.pop()
            raw: Any = conn.connection.dbapi_connection
            if _usable(raw):
                return conn
            self._drop(conn)
        with self._counting:
            making = self.made < KEEP
            self.made += making
        if making:
            offload.soon(self._make)
        raise offload.WouldWait("no connection kept for the loop yet")

    def _make(self) -> None:
        try:
            conn = self.engine.connect()
        except BaseException:
            with self._counting:
                self.made -= 1
            raise
        self.idle.append(conn)

    def _drop(self, conn: Connection) -> None:
        """Close a connection that failed or is dead: the server ends what it left open."""
        with self._counting:
            self.made -= 1
        conn.connection.info.pop(PREPARED, None)  # the server forgets them with the connection
        conn.invalidate()
        conn.close()

    def close(self) -> None:
        while self.idle:
            self._drop(self.idle.pop())


def _usable(raw: Any) -> bool:
    """Idle, in good shape, and not hung up on by the server (pipelined._hung_up)."""
    from psycopg import pq

    pgconn = raw.pgconn
    if raw.closed or raw.broken or pgconn.status != pq.ConnStatus.OK:
        return False
    if pgconn.transaction_status != pq.TransactionStatus.IDLE:
        return False
    return not select.select([raw.fileno()], [], [], 0)[0]


def _plain(sql: bytes) -> Callable[[Any], int]:
    def send(pgconn: Any) -> int:
        pgconn.send_query_params(sql, None)
        return 1

    return send


def _statement(query: Any, known: dict[tuple[bytes, tuple[int, ...]], bytes]) -> Callable[..., int]:
    """Sent as a statement the server prepared on this connection, preparing it the first time
    (its answer one more result to read)."""
    key = (query.query, tuple(query.types))

    def send(pgconn: Any) -> int:
        name = known.get(key)
        results = 1
        if name is None and len(known) < PREPARED_MAX:
            name = known[key] = f"ctxproxy_{len(known)}".encode()
            pgconn.send_prepare(name, query.query, param_types=query.types)
            results = 2
        if name is None:
            pgconn.send_query_params(
                query.query, query.params, param_types=query.types, param_formats=query.formats
            )
        else:
            pgconn.send_query_prepared(name, query.params, param_formats=query.formats)
        return results

    return send


async def _pipeline(raw: Any, sends: list[Callable[[Any], int]]) -> list[Any]:
    """Send the statements and a sync in one flush; each statement's result, in order."""
    from psycopg import pq

    pgconn = raw.pgconn
    fd = pgconn.socket
    pgconn.enter_pipeline_mode()  # on failure the connection is dropped, in this mode or not
    counts = [send(pgconn) for send in sends]
    pgconn.pipeline_sync()
    while pgconn.flush():  # more than the socket's buffer takes at once: libpq's way, reading
        await _ready(fd, write=True)  # what comes meanwhile, so that the server never waits
        pgconn.consume_input()
    fetched: list[list[Any]] = []
    current: list[Any] = []
    while True:  # what libpq read already first, then what comes
        while not pgconn.is_busy():
            r = pgconn.get_result()
            if r is None:
                if not current:
                    break
                fetched.append(current)
                current = []
            elif r.status == pq.ExecStatus.PIPELINE_SYNC:
                fetched.append([r])
            else:
                current.append(r)
        if fetched and fetched[-1][0].status == pq.ExecStatus.PIPELINE_SYNC:
            break
        await _ready(fd)
        pgconn.consume_input()
    pgconn.exit_pipeline_mode()
    ok = (pq.ExecStatus.COMMAND_OK, pq.ExecStatus.TUPLES_OK, pq.ExecStatus.PIPELINE_SYNC)
    if len(fetched) != sum(counts) + 1 or any(r[-1].status not in ok for r in fetched):
        raise offload.WouldWait("a statement failed: the thread's way runs it again")
    out, at = [], 0
    for n in counts:  # a prepare's result comes first: the statement's is the last
        at += n
        out.append(fetched[at - 1][-1])
    return out


def _fill(raw: Any, batch: Batch, results: list[Any]) -> None:
    """Hand each sent statement its rows, converted as the cursor's way converts them."""
    from psycopg.adapt import Transformer

    for (prepared, _, sent), result in zip(batch.sent, results, strict=False):
        if sent is None:
            continue
        tx = Transformer(raw)
        tx.set_pgresult(result)
        rows = tx.load_rows(0, result.ntuples, tuple)
        description = [(None, result.ftype(i)) for i in range(result.nfields)]
        sent._rows = Rows(prepared.convert(rows, description))


async def _ready(fd: int, write: bool = False) -> None:
    """Once `fd` can be read (or, with `write`, read or written)."""
    loop = asyncio.get_running_loop()
    ready = loop.create_future()

    def wake() -> None:
        if not ready.done():
            ready.set_result(None)

    loop.add_reader(fd, wake)
    if write:
        loop.add_writer(fd, wake)
    try:
        await ready
    finally:
        loop.remove_reader(fd)
        if write:
            loop.remove_writer(fd)
