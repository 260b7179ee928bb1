"""Client identity fields name the session but reach the upstream only when configured."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient

from proxy.app import create_app
from proxy.settings import Settings

LOCAL = "http://localhost"
DEVICE = "user_0123456789abcdef_account__session_5f1c"

ANSWERS: dict[str, dict[str, Any]] = {
    "/v1/chat/completions": {
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"}}],
        "usage": {"prompt_tokens": 5, "completion_tokens": 1, "total_tokens": 6},
    },
    "/v1/messages": {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "m",
        "content": [{"type": "text", "text": "ok"}],
        "stop_reason": "end_turn",
        "usage": {"input_tokens": 5, "output_tokens": 1},
    },
    "/v1/responses": {
        "id": "resp_1",
        "object": "response",
        "status": "completed",
        "output": [
            {
                "type": "message",
                "role": "assistant",
                "content": [{"type": "output_text", "text": "ok"}],
            }
        ],
        "usage": {"input_tokens": 5, "output_tokens": 1, "total_tokens": 6},
    },
}

# (path, body) per API: each carries the client's identity where that API puts it.
REQUESTS: dict[str, dict[str, Any]] = {
    "/v1/chat/completions": {
        "model": "m",
        "user": DEVICE,
        "safety_identifier": "acct-7",
        "messages": [{"role": "user", "content": "hi"}],
    },
    "/v1/messages": {
        "model": "m",
        "max_tokens": 16,
        "metadata": {"user_id": DEVICE},
        "messages": [{"role": "user", "content": "hi"}],
    },
    "/v1/responses": {"model": "m", "user": DEVICE, "input": "hi"},
}


def run(tmp_path: Path, path: str, native: bool, **settings: Any) -> tuple[str, dict, str]:
    """(the path the upstream saw, the body it got, the session the client was told)."""
    seen: list[tuple[str, dict]] = []

    def upstream(request: httpx.Request) -> httpx.Response:
        seen.append((request.url.path, json.loads(request.content)))
        return httpx.Response(200, json=ANSWERS[request.url.path])

    kind = "llamacpp" if native else "openai"  # llama.cpp serves all three APIs natively
    app = create_app(
        Settings(
            database_url=f"sqlite:///{tmp_path / 'db.sqlite'}",
            upstreams=[{"name": "u", "kind": kind, "base_url": "http://up.test/v1"}],
            **settings,
        ),
        transport=httpx.MockTransport(upstream),
    )
    with TestClient(app, base_url=LOCAL) as client:
        r = client.post(path, json=REQUESTS[path])
    assert r.status_code == 200, r.text
    [(sent_path, sent)] = [s for s in seen if s[0] != "/v1/models"]
    return sent_path, sent, r.headers["x-ctxproxy-session"]


def identity_in(sent: dict[str, Any]) -> list[Any]:
    metadata = sent.get("metadata") or {}
    return [sent.get("user"), sent.get("safety_identifier"), metadata.get("user_id")]


@pytest.mark.parametrize("native", [True, False], ids=["native", "translated"])
@pytest.mark.parametrize("path", list(REQUESTS))
def test_identity_names_the_session_but_stays_here(tmp_path: Path, path: str, native: bool) -> None:
    sent_path, sent, session = run(tmp_path, path, native)
    assert sent_path == (path if native else "/v1/chat/completions")
    assert identity_in(sent) == [None, None, None]
    assert DEVICE not in json.dumps(sent)
    assert session == DEVICE


@pytest.mark.parametrize("native", [True, False], ids=["native", "translated"])
@pytest.mark.parametrize("path", list(REQUESTS))
def test_identity_forwarded_when_configured(tmp_path: Path, path: str, native: bool) -> None:
    sent_path, sent, session = run(tmp_path, path, native, forward_client_identity=True)
    assert DEVICE in identity_in(sent)
    assert session == DEVICE
