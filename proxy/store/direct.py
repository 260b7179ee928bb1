"""The hot path's statements on the DBAPI cursor: each statement compiled once per dialect and
parameter names to its SQL text and SQLAlchemy's own type conversions, then sent straight to
the driver. SQLAlchemy's per-execution work (cache key, execution context, result metadata)
cost more than SQLite spends running a turn's dozen statements.

A statement is sent directly when everything it binds comes from its parameters or is fixed
when it is compiled; any other (an expanding IN, a default computed per row) goes through
SQLAlchemy on the same connection and transaction, as before."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar, cast

from sqlalchemy import Connection
from sqlalchemy.engine import Dialect
from sqlalchemy.exc import DBAPIError, MultipleResultsFound, NoResultFound
from sqlalchemy.sql import Executable
from sqlalchemy.sql.compiler import SQLCompiler

Processor = Callable[[Any], Any] | None


@dataclass
class Prepared:
    """One statement's SQL and how its parameters and rows are converted, for one dialect and
    one set of parameter names."""

    sql: str
    names: tuple[str, ...]  # the parameters in the order the SQL binds them
    positional: bool
    fixed: Mapping[str, Any]  # values bound at compile time (literals, scalar defaults)
    binds: tuple[Processor, ...]
    keys: tuple[str, ...]  # the result's column names
    types: tuple[Any, ...]  # and their SQLAlchemy types, for dialect
    dialect: Dialect
    results: tuple[Processor, ...] | None = None  # known at the first rows (driver's types)

    def convert(self, rows: list[Any], description: Sequence[Any]) -> list[Record]:
        results = self.results
        if results is None:
            results = self.results = tuple(
                t.dialect_impl(self.dialect).result_processor(self.dialect, d[1])
                for t, d in zip(self.types, description, strict=True)
            )
        out = []
        for row in rows:
            pairs = zip(results, row, strict=True)
            record = Record((p(v) if p is not None else v) for p, v in pairs)
            record.keys = self.keys
            out.append(record)
        return out

    def values(self, params: Mapping[str, Any]) -> Any:
        fixed = self.fixed
        out = [
            (p(v) if p is not None else v)
            for n, p in zip(self.names, self.binds, strict=True)
            for v in ((params[n] if n in params else fixed[n]),)
        ]
        return out if self.positional else dict(zip(self.names, out, strict=True))


DIRECT = "ctxproxy_direct"  # the execution option that marks a statement to send directly
PREPARED_MAX = 4096
# By the statement itself (its identity), held: a statement kept is compiled once per dialect
# and parameter names.
_PREPARED: dict[tuple[Any, str, tuple[str, ...]], Prepared | None] = {}

S = TypeVar("S", bound=Executable)


def reusable(stmt: S) -> S:
    """A statement built once and kept (engine.statement, the modules' caches), marked to be
    sent directly; a statement built per call goes through SQLAlchemy."""
    return stmt.execution_options(**{DIRECT: True})


def prepare(stmt: Any, dialect: Dialect, names: tuple[str, ...]) -> Prepared | None:
    """`stmt` compiled for `dialect` and parameters `names`, or None when it is not sent
    directly."""
    options = getattr(stmt, "get_execution_options", None)
    if options is None or not options().get(DIRECT):
        return None
    key = (stmt, dialect.name, names)
    if key not in _PREPARED:
        if len(_PREPARED) >= PREPARED_MAX:  # a cache that churns rebuilds its statements
            _PREPARED.clear()
        _PREPARED[key] = _compile(stmt, dialect, names)
    return _PREPARED[key]


def _compile(stmt: Any, dialect: Dialect, names: tuple[str, ...]) -> Prepared | None:
    c = stmt.compile(dialect=dialect, column_keys=list(names))
    assert isinstance(c, SQLCompiler)
    given = set(names)
    fixed: dict[str, Any] = {}
    for col in [*c.insert_prefetch, *c.update_prefetch]:  # Python-side column defaults
        if col.key in given:
            continue
        default = col.default if col in c.insert_prefetch else col.onupdate
        if default is None or not default.is_scalar:
            return None
        fixed[col.key] = cast(Any, default).arg
    for name, bp in c.binds.items():
        if name in given or name in fixed:
            continue
        if bp.expanding or bp.required or bp.callable is not None:
            return None
        fixed[name] = bp.value
    if c.positional:
        order = tuple(c.positiontup or ())
    else:
        order = tuple(c.bind_names[bp] for bp in c.binds.values())
        order = tuple(dict.fromkeys(order))
    if any(c.escaped_bind_names.get(n, n) != n for n in order):
        return None
    binds = tuple(_bind_processor(c, n, dialect) for n in order)
    columns = list(getattr(stmt, "exported_columns", ()))  # a SELECT's, or RETURNING's
    keys = tuple(col.key for col in columns)
    types = tuple(col.type for col in columns)
    return Prepared(c.string, order, c.positional, fixed, binds, keys, types, dialect)


def _bind_processor(c: SQLCompiler, name: str, dialect: Dialect) -> Processor:
    bp = c.binds.get(name)
    if bp is None:
        return None
    return bp.type.dialect_impl(dialect).bind_processor(dialect)


class Record(tuple[Any, ...]):
    """A row, as SQLAlchemy's Row reads: by position, or by name through `_mapping`."""

    keys: tuple[str, ...] = ()

    @property
    def _mapping(self) -> dict[str, Any]:
        return dict(zip(self.keys, self, strict=True))


class Rows:
    """A statement's rows, read as the hot path reads a SQLAlchemy result."""

    def __init__(self, rows: list[Record]) -> None:
        self.rows = rows

    def __iter__(self) -> Iterator[Record]:
        return iter(self.rows)

    def all(self) -> list[Record]:
        return self.rows

    def first(self) -> Record | None:
        return self.rows[0] if self.rows else None

    def one(self) -> Record:
        if len(self.rows) != 1:
            raise (NoResultFound if not self.rows else MultipleResultsFound)(
                f"{len(self.rows)} rows where one was expected"
            )
        return self.rows[0]

    def scalar_one(self) -> Any:
        return self.one()[0]

    def scalar_one_or_none(self) -> Any:
        if len(self.rows) > 1:
            raise MultipleResultsFound("more than one row where at most one was expected")
        return self.rows[0][0] if self.rows else None

    def scalars(self) -> list[Any]:
        return [r[0] for r in self.rows]


class Pending:
    """A sent statement's rows, fetched at the first read."""

    def __init__(self, prepared: Prepared, cursor: Any) -> None:
        self._prepared, self._cursor = prepared, cursor
        self._rows: Rows | None = None

    def rows(self) -> Rows:
        if self._rows is None:
            cursor = self._cursor
            try:
                self._rows = Rows(self._prepared.convert(cursor.fetchall(), cursor.description))
            finally:
                cursor.close()
        return self._rows


class Direct:
    """A write transaction's connection: `execute` as SQLAlchemy's, prepared statements on the
    driver's cursor, the rest through SQLAlchemy (same connection, same transaction)."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn
        self.dialect = conn.dialect
        self.raw: Any = conn.connection.dbapi_connection

    def driver(self, sql: str) -> None:
        """A statement without parameters or rows (BEGIN, COMMIT) on the driver."""
        try:
            self.raw.execute(sql)
        except self.dialect.loaded_dbapi.Error as exc:
            raise self._translated(exc, sql, None, None) from exc

    def begin_nested(self) -> Any:
        return self.conn.begin_nested()

    def execute(self, stmt: Any, params: Any = None) -> Any:
        many = isinstance(params, list)
        first = (params[0] if params else {}) if many else (params or {})
        prepared = prepare(stmt, self.dialect, tuple(first))
        if prepared is None:
            return self.conn.execute(stmt, params)
        cursor = self.raw.cursor()
        try:
            if many:
                cursor.executemany(prepared.sql, [prepared.values(p) for p in params])
                return Rows([])
            cursor.execute(prepared.sql, prepared.values(first))
            if not prepared.keys:
                return Rows([])
            return Rows(prepared.convert(cursor.fetchall(), cursor.description))
        except self.dialect.loaded_dbapi.Error as exc:
            raise self._translated(exc, prepared.sql, params, cursor) from exc
        finally:
            cursor.close()

    def send(self, stmt: Any, params: dict[str, Any]) -> Pending:
        """A statement whose rows are read later (`Pending.rows`): in a pipeline, once its
        transaction committed, so that nothing waits for it before COMMIT."""
        prepared = prepare(stmt, self.dialect, tuple(params))
        assert prepared is not None and prepared.keys, "send() is for hot statements with rows"
        cursor = self.raw.cursor()
        try:
            cursor.execute(prepared.sql, prepared.values(params))
        except self.dialect.loaded_dbapi.Error as exc:
            cursor.close()
            raise self._translated(exc, prepared.sql, params, cursor) from exc
        return Pending(prepared, cursor)

    def _translated(self, exc: Exception, sql: str, params: Any, cursor: Any) -> DBAPIError:
        """As SQLAlchemy raises it: its exception classes, and a connection found dead
        invalidated, so the transaction's retry takes a new one."""
        lost = self.dialect.is_disconnect(cast(Any, exc), self.raw, cursor)
        if lost:
            self.conn.invalidate(exc)
        dbapi = self.dialect.loaded_dbapi
        error = DBAPIError.instance(
            sql, params, exc, dbapi.Error, dialect=self.dialect, connection_invalidated=lost
        )
        return cast(DBAPIError, error)  # a DBAPI error, so one of DBAPIError's classes
