"""Fixtures for end-to-end tests: a real llama.cpp server shared by the whole session."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

try:
    from tests.llamacpp import LlamaServer, LlamaUnavailable, start_llama_server
except ModuleNotFoundError:  # pytest run without the repo root on sys.path
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    from tests.llamacpp import LlamaServer, LlamaUnavailable, start_llama_server


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
