"""Fixtures for the llama tests: a real llama.cpp server shared by the whole session."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from proxy.testing.llamacpp import LlamaServer, LlamaUnavailable, start_llama_server


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
