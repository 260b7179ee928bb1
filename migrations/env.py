"""Alembic environment: the store's own connection when ctxproxy runs it, else the settings."""

from __future__ import annotations

import logging.config

from alembic import context
from sqlalchemy import Connection

from proxy.store.engine import make_engine
from proxy.store.models import Base

config = context.config
target_metadata = Base.metadata


def run(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        # SQLite cannot ALTER most things; batch mode rebuilds the table instead.
        render_as_batch=connection.dialect.name == "sqlite",
        compare_type=True,
    )
    with context.begin_transaction():
        context.run_migrations()


def database_url() -> str:
    url = context.get_x_argument(as_dictionary=True).get("url")
    url = url or config.get_main_option("sqlalchemy.url")
    if url:
        return url
    from proxy.settings import load_settings

    return load_settings().database_url


def run_offline() -> None:
    context.configure(
        url=database_url(),
        target_metadata=target_metadata,
        literal_binds=True,
        render_as_batch=True,
    )
    with context.begin_transaction():
        context.run_migrations()


def run_online() -> None:
    given = config.attributes.get("connection")
    if given is not None:
        run(given)
        return
    if config.config_file_name and config.get_section("loggers"):
        logging.config.fileConfig(config.config_file_name, disable_existing_loggers=False)
    engine = make_engine(database_url()).execution_options(ctxproxy_write=True)
    try:
        with engine.begin() as conn:
            run(conn)
    finally:
        engine.dispose()


if context.is_offline_mode():
    run_offline()
else:
    run_online()
