"""Alembic migrations for the store, runnable from a source tree or an installed package."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Connection, Engine, text

HERE = Path(__file__).resolve().parent
# Any constant works; it only has to be the same for every ctxproxy process.
PG_LOCK_KEY = 0x637478707278


def config(connection: Connection | None = None, url: str | None = None) -> Config:
    """An Alembic Config built from this package's folder, whatever the working directory."""
    cfg = Config(str(HERE / "alembic.ini"))
    cfg.set_main_option("script_location", str(HERE))
    if url is not None:
        cfg.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    if connection is not None:
        cfg.attributes["connection"] = connection
    return cfg


def upgrade(engine: Engine, revision: str = "head") -> None:
    with engine.begin() as conn:
        _serialise(conn)
        command.upgrade(config(conn), revision)


def downgrade(engine: Engine, revision: str) -> None:
    with engine.begin() as conn:
        _serialise(conn)
        command.downgrade(config(conn), revision)


def heads() -> set[str]:
    return set(ScriptDirectory.from_config(config()).get_heads())


def current(engine: Engine) -> set[str]:
    with engine.connect() as conn:
        return set(MigrationContext.configure(conn).get_current_heads())


def needs_upgrade(engine: Engine) -> bool:
    return current(engine) != heads()


def _serialise(conn: Connection) -> None:
    # Two proxies starting at once must not both run the same migration. SQLite is covered
    # by BEGIN IMMEDIATE; PostgreSQL takes an advisory lock held until this transaction ends.
    if conn.dialect.name == "postgresql":
        conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": PG_LOCK_KEY})
