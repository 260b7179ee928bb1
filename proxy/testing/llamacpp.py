"""The real llama.cpp server (proxy/cli/localmodel.py) as the tests and benchmarks use it: the
model in a test cache ($CTXPROXY_TEST_CACHE, else ~/.cache/ctxproxy-tests)."""

from __future__ import annotations

import os
from pathlib import Path

from proxy.cli.localmodel import (
    MODEL_FILE,
    LlamaServer,
    LlamaUnavailable,
    free_port,
)
from proxy.cli.localmodel import ensure_model as _ensure
from proxy.cli.localmodel import start_llama_server as _start

__all__ = [
    "MODEL_FILE",
    "LlamaServer",
    "LlamaUnavailable",
    "default_cache_dir",
    "ensure_model",
    "free_port",
    "start_llama_server",
]


def default_cache_dir() -> Path:
    env = os.environ.get("CTXPROXY_TEST_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "ctxproxy-tests"


def ensure_model(cache_dir: Path | None = None) -> Path:
    return _ensure(cache_dir or default_cache_dir())


def start_llama_server(
    cache_dir: Path | None = None, port: int | None = None, n_ctx: int = 8192, n_parallel: int = 2
) -> LlamaServer:
    """Fetch the model if needed and start a server; raise LlamaUnavailable if we cannot."""
    return _start(cache_dir or default_cache_dir(), port, n_ctx, n_parallel)
