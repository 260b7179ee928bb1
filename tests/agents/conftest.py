"""Fixtures for the real agent CLIs: pinned installs, the coding upstream, ctxproxy per window."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from proxy.settings import Settings
from proxy.testing.coder import Coder
from proxy.testing.servers import ServerThread, make_settings
from tests.agents.clis import Scene
from tests.agents.install import Unavailable, ensure_aider, ensure_npm
from tests.agents.repo import make_repo

AGENT_RUN = "agent_cli_run"  # tests/conftest.py prints these at the end of the run


@pytest.fixture
def record(request: pytest.FixtureRequest) -> Iterator[list[dict[str, Any]]]:
    runs: list[dict[str, Any]] = []
    yield runs
    request.node.user_properties.extend((AGENT_RUN, run) for run in runs)


@pytest.fixture(scope="session")
def npm_bin() -> Path:
    try:
        return ensure_npm()
    except Unavailable as exc:
        pytest.skip(f"the npm agent CLIs cannot be installed here: {exc}")


@pytest.fixture(scope="session")
def aider_bin() -> Path:
    try:
        return ensure_aider()
    except Unavailable as exc:
        pytest.skip(f"aider cannot be installed here: {exc}")


@pytest.fixture(scope="session")
def coder_server() -> Iterator[tuple[Coder, ServerThread]]:
    coder = Coder(python=sys.executable)
    with ServerThread(coder.app) as server:
        yield coder, server


@pytest.fixture
def scene(tmp_path: Path, coder_server: tuple[Coder, ServerThread]) -> Scene:
    coder, _ = coder_server
    repo = tmp_path / "repo"
    coder.reset(repo, make_repo(repo))
    return Scene(repo, tmp_path / "home", coder)


@pytest.fixture
def ctxproxy(
    tmp_path: Path,
    scene: Scene,
    coder_server: tuple[Coder, ServerThread],
    start_proxy: Callable[[Settings], ServerThread],
) -> Callable[[int], str]:
    """Start ctxproxy with a `kind: openai` upstream of the given window; returns its URL."""

    def start(window: int) -> str:
        upstream = {
            "name": "coder",
            "kind": "openai",
            "base_url": coder_server[1].url + "/v1",
            "api_key": "upstream-secret",
            "models": ["*"],
            "context_window": window,
        }
        scene.settings = make_settings(tmp_path, "", upstreams=[upstream])
        scene.proxy = start_proxy(scene.settings).url
        return scene.proxy

    return start
