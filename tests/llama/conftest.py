"""Fixtures for the llama tests: a real llama.cpp server shared by the whole session."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from proxy.testing.llamacpp import LlamaServer, LlamaUnavailable, start_llama_server


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """One llama.cpp server a run: under pytest-xdist, every llama test goes to one worker."""
    for item in items:
        if item.get_closest_marker("llama"):
            item.add_marker(pytest.mark.xdist_group("llama"))


@pytest.fixture(scope="session")
def llama() -> Iterator[LlamaServer]:
    """A started llama.cpp server (SmolLM2-135M, n_ctx 8192 over 2 slots)."""
    try:
        server = start_llama_server()
    except LlamaUnavailable as exc:
        pytest.skip(f"no real llama.cpp server here: {exc}")
    try:
        yield server
    finally:
        server.stop()
