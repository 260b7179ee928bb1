"""Shared fixtures: a scripted upstream and ctxproxy itself, both real uvicorn servers."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings as hypothesis_settings

from proxy.settings import Settings
from proxy.testing.scripted import Script
from proxy.testing.servers import ServerThread, make_settings

BROWSER_MISSING = "no Chromium and chromedriver here"

# Property tests judge results, not speed: on a busy 2-core machine one example can take longer
# than hypothesis's 200 ms default deadline, which then fails a correct test.
hypothesis_settings.register_profile("ctxproxy", deadline=None)
hypothesis_settings.load_profile("ctxproxy")


# The user property tests/agents records each CLI run in: reports reach the controller from
# xdist's workers, a worker's state does not; and only this conftest is loaded there.
AGENT_RUN = "agent_cli_run"


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """Say plainly when the viewer's browser tests did not run, and how to run them; then one
    line per agent CLI run, what a reader of the CI log wants to see at a glance."""
    browser_skips(terminalreporter)
    reports = [r for rs in terminalreporter.stats.values() for r in rs if hasattr(r, "when")]
    runs = [
        run
        for r in reports
        if r.when == "teardown"
        for name, run in r.user_properties
        if name == AGENT_RUN
    ]
    if runs:
        terminalreporter.write_sep("-", "agent CLI runs through ctxproxy")
        for run in runs:
            terminalreporter.write_line("  ".join(f"{k}={v}" for k, v in run.items()))


def browser_skips(terminalreporter: Any) -> None:
    skipped = [
        r for r in terminalreporter.stats.get("skipped", []) if BROWSER_MISSING in str(r.longrepr)
    ]
    if skipped:
        terminalreporter.write_sep(
            "!", f"{len(skipped)} browser tests of the session viewer SKIPPED", yellow=True
        )
        terminalreporter.write_line(
            "They need Chromium and chromedriver: `sudo apt-get install chromium "
            "chromium-driver` (Debian, Ubuntu), then run scripts/test again. scripts/test "
            "installs them itself where apt-get needs no password."
        )


@pytest.fixture(scope="session", autouse=True)
def postgres_server() -> Iterator[None]:
    """Stops the embedded PostgreSQL at the end if a test started it (proxy/testing/postgres.py)."""
    from proxy.testing.postgres import stop_embedded

    yield
    stop_embedded()


@pytest.fixture(scope="session")
def scripted_server() -> Iterator[tuple[Script, ServerThread]]:
    script = Script()
    with ServerThread(script.app) as server:
        yield script, server


@pytest.fixture
def script(scripted_server: tuple[Script, ServerThread]) -> Script:
    script, _ = scripted_server
    script.reset()
    return script


@pytest.fixture
def upstream_url(scripted_server: tuple[Script, ServerThread]) -> str:
    return scripted_server[1].url + "/v1"


@pytest.fixture
def settings_for(tmp_path: Path, upstream_url: str) -> Callable[..., Settings]:
    return lambda **overrides: make_settings(tmp_path, upstream_url, **overrides)


@pytest.fixture
def start_proxy() -> Iterator[Callable[[Settings], ServerThread]]:
    servers: list[ServerThread] = []

    from proxy.app import create_app

    def start(settings: Settings) -> ServerThread:
        server = ServerThread(create_app(settings)).__enter__()
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.__exit__()


@pytest.fixture
def proxy(
    start_proxy: Callable[[Settings], ServerThread], settings_for: Callable[..., Settings]
) -> ServerThread:
    return start_proxy(settings_for())


@contextmanager
def proxy_on(db: str, tmp_path: Path, upstream_url: str, **overrides: Any) -> Iterator[str]:
    """ctxproxy on SQLite or on a throwaway PostgreSQL database, stopped before it is dropped."""
    from proxy.app import create_app
    from proxy.testing.postgres import postgres_database

    if db == "sqlite":
        with ServerThread(create_app(make_settings(tmp_path, upstream_url, **overrides))) as s:
            yield s.url
        return
    with postgres_database("ctxproxy_e2e") as url:
        settings = make_settings(tmp_path, upstream_url, database_url=url, **overrides)
        with ServerThread(create_app(settings)) as s:
            yield s.url
