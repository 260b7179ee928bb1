"""A throwaway PostgreSQL database for tests, or a skip that says why there is none."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

PG_ADMIN = os.environ.get("CTXPROXY_TEST_PG", "postgresql+psycopg://postgres@127.0.0.1:5432/test")


@contextmanager
def postgres_database(prefix: str = "ctxproxy_test") -> Iterator[str]:
    psycopg = pytest.importorskip("psycopg", reason="psycopg not installed")
    from sqlalchemy.engine import make_url

    admin = make_url(PG_ADMIN)
    name = f"{prefix}_{uuid.uuid4().hex[:10]}"
    dsn = f"host={admin.host} port={admin.port or 5432} user={admin.username}"
    dsn += f" dbname={admin.database}"
    try:
        with psycopg.connect(dsn, autocommit=True, connect_timeout=3) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
    except psycopg.OperationalError as exc:
        pytest.skip(f"PostgreSQL unreachable at {admin.host}:{admin.port}: {exc}")
    try:
        yield admin.set(database=name).render_as_string(hide_password=False)
    finally:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
