"""Paths that are not the chat route's: never the upstream's chat endpoint, never outside /v1."""

from __future__ import annotations

import http.client
import json
from collections.abc import Iterator
from typing import Any

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from proxy.testing.servers import ServerThread

HELLO = [{"role": "user", "content": "hi"}]


class Recorder:
    """An upstream that answers every method on every path and notes what reached it."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str]] = []
        self.app = Starlette(routes=[Route("/{p:path}", self.any, methods=_ALL)])

    async def any(self, request: Request) -> JSONResponse:
        self.seen.append((request.method, request.scope["raw_path"].decode()))
        return JSONResponse({"object": "list", "data": []})


_ALL = ["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"]


@pytest.fixture(scope="module")
def recording() -> Iterator[tuple[Recorder, str]]:
    rec = Recorder()
    with ServerThread(rec.app) as server:
        yield rec, server.url


@pytest.fixture
def recorder(recording: tuple[Recorder, str]) -> tuple[Recorder, str]:
    recording[0].seen.clear()
    return recording


def send(port: int, method: str, path: str, body: Any = None) -> tuple[int, dict[str, Any]]:
    """http.client sends the path exactly as written (httpx would resolve dot segments)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    data = json.dumps(body).encode() if body is not None else None
    headers = {"Content-Type": "application/json"} if data else {}
    conn.request(method, path, body=data, headers=headers)
    r = conn.getresponse()
    raw = r.read()
    conn.close()
    return r.status, json.loads(raw) if raw else {}


@pytest.fixture(scope="module")
def proxy_port(recording, tmp_path_factory) -> Iterator[int]:
    from proxy.app import create_app
    from proxy.testing.servers import make_settings

    _, url = recording
    upstream = {"name": "rec", "base_url": url + "/v1", "api_key": "operator-secret"}
    settings = make_settings(tmp_path_factory.mktemp("paths"), url, upstreams=[upstream])
    with ServerThread(create_app(settings)) as server:
        yield server.port


CHAT_VARIANTS = [
    "/v1/./chat/completions",
    "/v1//chat/completions",
    "/v1/chat/completions/",
    "/v1/chat//completions",
    "/v1/chat/./completions",
    "/v1/chat/completions%3F",
    "/v1/Chat/Completions",
    "/v1/x/../chat/completions",
    "/s/a/v1/./chat/completions",
    "/s/a/v1/chat/completions/",
]


@pytest.mark.parametrize("path", CHAT_VARIANTS)
def test_chat_path_variants_are_refused_not_forwarded(recorder, proxy_port, path: str) -> None:
    rec, _ = recorder
    status, body = send(proxy_port, "POST", path, {"model": "m", "messages": HELLO})
    assert status in (400, 405), body
    assert body["error"]["code"] in ("invalid_path", "method_not_allowed")
    assert rec.seen == []


TRAVERSALS = [
    "/v1/%2e%2e/slots/0?action=erase",
    "/v1/%2E%2E%2Fslots/0?action=erase",
    "/v1/../slots/0?action=erase",
    "/v1/..%2fslots/0?action=erase",
    "/v1/%2e%2e%2f%2e%2e/props",
    "/v1/embeddings/../../props",
    "/v1/%252e%252e/props",
    "/v1/..%5cprops",
    "/s/a/v1/%2e%2e/slots/0?action=erase",
]


@pytest.mark.parametrize("path", TRAVERSALS)
def test_nothing_leaves_the_upstreams_base_path(recorder, proxy_port, path: str) -> None:
    rec, _ = recorder
    status, body = send(proxy_port, "POST", path, {"model": "m"})
    assert status == 400, body
    assert body["error"]["code"] == "invalid_path"
    assert rec.seen == []


@pytest.mark.parametrize("method", ["PUT", "PATCH", "DELETE"])
@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/models/m", "/v1/embeddings"])
def test_only_get_and_post_are_forwarded(recorder, proxy_port, method: str, path: str) -> None:
    rec, _ = recorder
    status, body = send(proxy_port, method, path, {"model": "m"})
    assert status == 405, body
    assert body["error"]["code"] == "method_not_allowed"
    assert rec.seen == []


def test_canonical_passthrough_paths_still_forward(recorder, proxy_port) -> None:
    rec, _ = recorder
    assert send(proxy_port, "POST", "/v1/embeddings", {"model": "m", "input": "x"})[0] == 200
    assert send(proxy_port, "GET", "/v1/models/org/some-model.gguf")[0] == 200
    assert send(proxy_port, "GET", "/v1/files?purpose=batch")[0] == 200
    assert rec.seen == [
        ("POST", "/v1/embeddings"),
        ("GET", "/v1/models/org/some-model.gguf"),
        ("GET", "/v1/files"),
    ]
