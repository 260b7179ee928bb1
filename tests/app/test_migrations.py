"""Migrations: from an empty database, down to nothing and up again, matching the models."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Engine, inspect

import migrations
from proxy.cli.commands import main
from proxy.store import Store
from proxy.store.models import Base
from proxy.testing.postgres import postgres_database
from proxy.testing.records import new_request

TABLES = {
    "sessions",
    "messages",
    "entries",
    "exchanges",
    "exchange_messages",
    "view_states",
    "instances",
    "secrets",
}


@pytest.fixture(params=["sqlite", "postgresql"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'migrate.db'}"
        return
    with postgres_database("ctxproxy_migr") as pg:
        yield pg


def tables(engine: Engine) -> set[str]:
    return set(inspect(engine).get_table_names()) - {"alembic_version"}


def differences(engine: Engine) -> list[object]:
    """What `alembic check` would report: the models against the migrated schema."""
    with engine.connect() as conn:
        ctx = MigrationContext.configure(conn, opts={"compare_type": True})
        return list(compare_metadata(ctx, Base.metadata))


def test_upgrade_from_empty_matches_the_models_and_round_trips(url: str) -> None:
    store = Store(url)
    assert store.needs_upgrade() and tables(store.engine) == set()
    store.upgrade()
    assert tables(store.engine) == TABLES
    assert migrations.current(store.engine) == migrations.heads()
    assert len(migrations.heads()) == 1  # one line of history, no unmerged branches
    assert differences(store.engine) == []

    migrations.downgrade(store.engine, "base")
    assert tables(store.engine) == set() and store.needs_upgrade()
    store.upgrade()
    assert differences(store.engine) == []
    store.close()


def test_upgrading_a_current_database_keeps_its_data(tmp_path: Path) -> None:
    store = Store(f"sqlite:///{tmp_path / 'kept.db'}")
    store.upgrade()
    msgs = [{"role": "user", "content": "remember me"}]
    store.record_request(new_request("s1", msgs, request={}, tokens_original=3, tokens_compiled=3))
    store.close()
    again = Store(f"sqlite:///{tmp_path / 'kept.db'}")
    again.upgrade()
    hist = again.get_history("s1")
    assert hist is not None and [m.message for m in hist.messages] == msgs
    again.close()


def test_every_revision_upgrades_from_the_one_before(tmp_path: Path) -> None:
    """Walk the chain one step at a time, as an outdated database would be upgraded."""
    script = ScriptDirectory.from_config(migrations.config())
    chain = [rev.revision for rev in reversed(list(script.walk_revisions()))]
    store = Store(f"sqlite:///{tmp_path / 'steps.db'}")
    for revision in chain:
        migrations.upgrade(store.engine, revision)
        assert migrations.current(store.engine) == {revision}
    assert not store.needs_upgrade() and differences(store.engine) == []
    store.close()


def test_the_alembic_config_works_from_any_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    db = f"sqlite:///{tmp_path / 'cli.db'}"
    command.upgrade(migrations.config(url=db), "head")  # env.py opens its own engine
    store = Store(db)
    assert not store.needs_upgrade() and tables(store.engine) == TABLES
    store.close()


def test_ctxproxy_migrate_upgrades_the_configured_database(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(f"database_url: sqlite:///{tmp_path / 'cmd.db'}\n")
    assert main(["--config", str(config), "migrate"]) == 0
    assert capsys.readouterr().out == f"ctxproxy: database {tmp_path / 'cmd.db'} (created)\n"
    store = Store(f"sqlite:///{tmp_path / 'cmd.db'}")
    assert not store.needs_upgrade()
    store.close()
    assert main(["--config", str(config), "migrate"]) == 0
    assert capsys.readouterr().out.endswith("cmd.db (up to date)\n")
