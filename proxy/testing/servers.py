"""Run an ASGI app in a real uvicorn server on a loopback port, in a thread of the test process."""

from __future__ import annotations

import socket
import threading
import time
from pathlib import Path
from typing import Any

import uvicorn

from proxy.settings import Settings


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class ServerThread:
    def __init__(self, app: Any, port: int | None = None, **config: Any):
        self.port = port or free_port()
        cfg = uvicorn.Config(
            app,
            host="127.0.0.1",
            port=self.port,
            log_level="warning",
            lifespan="on",
            timeout_graceful_shutdown=2,
            **config,
        )
        self.server = uvicorn.Server(cfg)
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> ServerThread:
        self.thread.start()
        deadline = time.monotonic() + 20
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"server on port {self.port} did not start")
            time.sleep(0.01)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)


def make_settings(tmp_path: Path, upstream_url: str, **overrides: Any) -> Settings:
    """ctxproxy's settings for a test: a SQLite file in tmp_path, one upstream at upstream_url."""
    data: dict[str, Any] = {
        "database_url": f"sqlite:///{tmp_path / 'ctxproxy.db'}",
        "upstreams": [
            {
                "name": "scripted",
                "kind": "openai",
                "base_url": upstream_url,
                "api_key": "upstream-secret",
                "models": ["*"],
            }
        ],
    }
    data.update(overrides)
    return Settings(**data)
