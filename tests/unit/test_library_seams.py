"""What the store takes from SQLAlchemy and psycopg beyond their everyday API, named so that an
upgrade that changes it fails here rather than silently sending every statement the slow way."""

from __future__ import annotations

from sqlalchemy import bindparam, insert, select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.sql.compiler import SQLCompiler

from proxy.store import direct
from proxy.store.models import ExchangeRow, SessionRow


def test_the_compiler_attributes_direct_reads_are_there() -> None:
    stmt = insert(SessionRow).returning(SessionRow.id)
    for dialect in (sqlite.dialect(), postgresql.psycopg.dialect()):
        c = stmt.compile(dialect=dialect, column_keys=["id", "source"])
        assert isinstance(c, SQLCompiler)
        for name in ("binds", "bind_names", "insert_prefetch", "update_prefetch"):
            assert hasattr(c, name), name
        assert hasattr(c, "escaped_bind_names") and hasattr(c, "positional")
        assert c.positional == (c.positiontup is not None)


def test_a_statement_built_once_is_sent_directly_on_both_dialects() -> None:
    stmt = direct.reusable(
        select(ExchangeRow.id, ExchangeRow.seq).where(ExchangeRow.id == bindparam("x"))
    )
    for dialect in (sqlite.dialect(), postgresql.psycopg.dialect()):
        prepared = direct.prepare(stmt, dialect, ("x",))
        assert prepared is not None
        assert prepared.keys == ("id", "seq")
        assert prepared.values({"x": 7}) in ([7], {"x": 7})
    built_per_call = select(ExchangeRow.id)
    assert direct.prepare(built_per_call, sqlite.dialect(), ()) is None


def test_psycopg_binds_a_statement_as_the_loop_sends_it() -> None:
    """store/looped.py: psycopg._queries.PostgresQuery turns a statement and its parameters into
    what libpq's send_query_params and send_query_prepared take."""
    from psycopg import pq
    from psycopg._queries import PostgresQuery
    from psycopg.adapt import Transformer

    query = PostgresQuery(Transformer())
    query.convert("SELECT %(a)s::int, %(b)s::text", {"a": 1, "b": "x"})
    assert query.query == b"SELECT $1::int, $2::text"
    assert query.params is not None and len(query.params) == 2
    assert query.types is not None and len(query.types) == 2
    assert query.formats is not None and all(isinstance(f, pq.Format) for f in query.formats)
