"""Routing, errors and pass-through, with the upstream replaced by httpx.MockTransport."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
from fastapi.testclient import TestClient

from proxy.app import create_app
from proxy.settings import Settings

LOCAL = "http://localhost"  # the Host a local client sends; TestClient's own is refused

HELLO = [{"role": "user", "content": "hi"}]
Handler = Callable[[httpx.Request], httpx.Response]


def answer(request: httpx.Request) -> httpx.Response:
    body = json.loads(request.content) if request.content else {}
    data = {"upstream": str(request.url), "got": body, "auth": request.headers.get("authorization")}
    data["choices"] = [{"index": 0, "message": {"role": "assistant", "content": "ok"}}]
    return httpx.Response(
        200, content=json.dumps(data), headers={"content-type": "application/json"}
    )


def app_with(tmp_path: Path, handler: Handler = answer, **overrides) -> TestClient:
    data = {
        "database_url": f"sqlite:///{tmp_path / 'db.sqlite'}",
        "upstreams": [
            {
                "name": "big",
                "base_url": "http://big.test/v1",
                "models": ["llama-70b"],
                "api_key": "big-key",
            },
            {"name": "default", "base_url": "http://small.test/v1", "models": ["*"]},
        ],
        **overrides,
    }
    app = create_app(Settings(**data), transport=httpx.MockTransport(handler))
    return TestClient(app, base_url=LOCAL)


def test_routes_by_model_with_default(tmp_path: Path) -> None:
    with app_with(tmp_path) as client:
        big = client.post("/v1/chat/completions", json={"model": "llama-70b", "messages": HELLO})
        small = client.post("/v1/chat/completions", json={"model": "other", "messages": HELLO})
    assert big.json()["upstream"] == "http://big.test/v1/chat/completions"
    assert big.json()["auth"] == "Bearer big-key"
    assert small.json()["upstream"] == "http://small.test/v1/chat/completions"
    assert small.json()["auth"] is None


def test_no_default_route_is_404(tmp_path: Path) -> None:
    ups = [{"name": "big", "base_url": "http://big.test/v1", "models": ["llama-70b"]}]
    with app_with(tmp_path, upstreams=ups) as client:
        r = client.post("/v1/chat/completions", json={"model": "gpt-x", "messages": HELLO})
    assert r.status_code == 404 and r.json()["error"]["code"] == "model_not_found"


def test_body_forwarded_with_unknown_fields(tmp_path: Path) -> None:
    body = {
        "model": "m",
        "messages": HELLO,
        "seed": 3,
        "logit_bias": {"50256": -100},
        "mirostat": 2,
        "stream": False,
    }
    with app_with(tmp_path) as client:
        got = client.post("/v1/chat/completions", json=body).json()["got"]
    assert got == body


def test_passthrough_routes_forward_path_query_and_body(tmp_path: Path) -> None:
    with app_with(tmp_path) as client:
        emb = client.post("/v1/embeddings", json={"model": "llama-70b", "input": "x"})
        listed = client.get("/v1/files?purpose=batch")
    assert emb.json()["upstream"] == "http://big.test/v1/embeddings"
    assert emb.json()["got"] == {"model": "llama-70b", "input": "x"}
    assert listed.json()["upstream"] == "http://small.test/v1/files?purpose=batch"


def test_path_prefix_session_routes(tmp_path: Path) -> None:
    with app_with(tmp_path) as client:
        r = client.post("/s/agent-7/v1/chat/completions", json={"model": "m", "messages": HELLO})
        models = client.get("/s/agent-7/v1/models")
    assert r.status_code == 200 and r.headers["x-ctxproxy-session"] == "agent-7"
    assert models.status_code == 200


def test_upstream_error_passes_through_with_its_body(tmp_path: Path) -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        return httpx.Response(
            429, json={"error": {"message": "slow down"}}, headers={"retry-after": "3"}
        )

    with app_with(tmp_path, refuse) as client:
        r = client.post("/v1/chat/completions", json={"model": "m", "messages": HELLO})
    assert r.status_code == 429 and r.headers["retry-after"] == "3"
    assert r.json() == {"error": {"message": "slow down"}}


@pytest.mark.parametrize(
    "exc, status",
    [
        (httpx.ConnectError("refused"), 502),
        (httpx.ReadTimeout("slow"), 504),
        (httpx.RemoteProtocolError("garbage"), 502),
    ],
)
def test_transport_failures_map_to_gateway_errors(
    tmp_path: Path, exc: Exception, status: int
) -> None:
    def fail(request: httpx.Request) -> httpx.Response:
        raise exc

    with app_with(tmp_path, fail) as client:
        r = client.post("/v1/chat/completions", json={"model": "m", "messages": HELLO})
    assert r.status_code == status
    assert r.json()["error"]["type"] == "upstream_error"


def test_client_keys_constant_time_and_not_forwarded(tmp_path: Path) -> None:
    with app_with(tmp_path, api_keys=["sk-1", "sk-2"]) as client:
        none = client.post("/v1/chat/completions", json={"model": "m", "messages": HELLO})
        wrong = client.post(
            "/v1/chat/completions",
            json={"model": "m", "messages": HELLO},
            headers={"authorization": "Bearer sk-3"},
        )
        right = client.post(
            "/v1/chat/completions",
            json={"model": "m", "messages": HELLO},
            headers={"authorization": "Bearer sk-2"},
        )
        models = client.get("/v1/models")
    assert none.status_code == wrong.status_code == models.status_code == 401
    assert right.status_code == 200 and right.json()["auth"] is None


def test_unexpected_error_is_enveloped_without_trace(tmp_path: Path) -> None:
    def boom(request: httpx.Request) -> httpx.Response:
        raise RuntimeError("secret internals")

    with app_with(tmp_path, boom) as client:
        client_no_raise = TestClient(client.app, raise_server_exceptions=False, base_url=LOCAL)
        with client_no_raise:
            r = client_no_raise.post("/v1/chat/completions", json={"model": "m", "messages": HELLO})
    assert r.status_code == 500
    assert r.json()["error"]["type"] == "server_error" and "secret" not in r.text


def test_lone_surrogate_is_400_paired_one_is_fine(tmp_path: Path) -> None:
    lone = b'{"model": "m", "messages": [{"role": "user", "content": "bad \\ud800 text"}]}'
    pair = b'{"model": "m", "messages": [{"role": "user", "content": "ok \\ud83d\\ude00"}]}'
    headers = {"content-type": "application/json"}
    with app_with(tmp_path) as client:
        bad = client.post("/v1/chat/completions", content=lone, headers=headers)
        good = client.post("/v1/chat/completions", content=pair, headers=headers)
    assert bad.status_code == 400 and "surrogate" in bad.json()["error"]["message"]
    assert good.status_code == 200
    assert good.json()["got"]["messages"][0]["content"] == "ok \U0001f600"


@pytest.mark.parametrize(
    "path", ["/v1/chat/completions", "/s/agent-7/v1/messages", "/v1/responses"]
)
def test_the_chat_routes_refuse_a_foreign_host_before_anything_is_sent(
    tmp_path: Path, path: str
) -> None:
    sent: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        sent.append(request)
        return answer(request)

    body = {"model": "m", "messages": HELLO, "input": "hi", "max_tokens": 10}
    with app_with(tmp_path, handler) as client:
        r = client.post(path, json=body, headers={"Host": "rebind.attacker.example"})
        stored = client.app.state.services.store.list_sessions()
    assert r.status_code == 400 and sent == [] and stored.total == 0
    if path.endswith("/v1/messages"):  # the envelope of the API the path belongs to
        assert r.json()["type"] == "error"
        assert r.json()["error"]["type"] == "invalid_request_error"
        assert "is not allowed" in r.json()["error"]["message"]
    else:
        assert r.json()["error"]["code"] == "invalid_host"


def test_an_unexpected_error_on_messages_is_a_500_in_anthropics_envelope(tmp_path: Path) -> None:
    def broken(request: httpx.Request) -> httpx.Response:
        raise RuntimeError("a bug, not an upstream's fault")

    body = {"model": "m", "messages": HELLO, "max_tokens": 10}
    with app_with(tmp_path, broken) as client:
        r = client.post("/s/agent-7/v1/messages", json=body)
        registry = client.app.state.services.metrics.registry
    assert r.status_code == 500
    assert r.json()["type"] == "error" and r.json()["error"]["type"] == "api_error"
    assert "a bug" not in r.text
    route = {"method": "POST", "route": "/s/{session}/v1/messages", "status": "500"}
    assert registry.get_sample_value("ctxproxy_http_requests_total", route) == 1
