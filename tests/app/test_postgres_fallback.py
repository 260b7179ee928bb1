"""Where no PostgreSQL answers at CTXPROXY_TEST_PG, the tests start one of their own and stop it."""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from proxy.testing.postgres import connect_args

CHILD = """
import sqlalchemy as sa
from proxy.testing.postgres import postgres_database, stop_embedded
with postgres_database("ctxproxy_fallback") as url:
    engine = sa.create_engine(url)
    with engine.connect() as conn:
        print(conn.execute(sa.text("select current_database()")).scalar())
    engine.dispose()
stop_embedded()
"""


@pytest.fixture
def pgdata() -> Iterator[Path]:
    """Outside pytest's base temp: each pytest run closes that to other users, the server's own."""
    where = Path(tempfile.mkdtemp(prefix="ctxproxy-pgtest-"))
    yield where / "pgdata"
    shutil.rmtree(where)


def test_a_test_run_without_a_server_starts_one_and_stops_it(pgdata: Path) -> None:
    with socket.socket() as sock:  # a port where nothing listens
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    env = {
        "CTXPROXY_TEST_PG": f"postgresql+psycopg://postgres@127.0.0.1:{port}/test",
        "CTXPROXY_TEST_PGDATA": str(pgdata),
        # No PostgreSQL on it, but the system's tools: as root the server runs as a user of
        # its own, which a fresh machine has yet to add (useradd, in sbin).
        "PATH": "/usr/sbin:/usr/bin:/sbin:/bin",
    }
    done = subprocess.run(
        [sys.executable, "-c", CHILD], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("ctxproxy_fallback_")
    assert (pgdata / "PG_VERSION").exists()
    assert not (pgdata / "postmaster.pid").exists()  # stopped when the run ended


def test_a_socket_url_connects_through_its_directory() -> None:
    from sqlalchemy.engine import make_url

    url = make_url("postgresql+psycopg://postgres@/db?host=%2Ftmp%2Fpg")
    assert connect_args(url) == {"host": "/tmp/pg", "user": "postgres", "dbname": "db"}
