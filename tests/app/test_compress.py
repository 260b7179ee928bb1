"""POST /v1/compress and GET /v1/retrieve: the proxy's view, returned instead of forwarded."""

from __future__ import annotations

import json
import re
from pathlib import Path

import httpx
from fastapi.testclient import TestClient

from proxy.app import create_app
from proxy.settings import Settings
from proxy.testing.histories import agent_turn
from proxy.testing.validity import problems
from strategies.messages import original_ref

LOCAL = "http://localhost"
TASK = [
    {"role": "system", "content": "You are a coding agent."},
    {"role": "user", "content": "Fix the failing tests in the parser package."},
]


def history(turns: int) -> list[dict]:
    return [*TASK, *(m for t in range(turns) for m in agent_turn(t))]


def client_for(tmp_path: Path, sent: list[httpx.Request], **overrides) -> TestClient:
    def upstream(request: httpx.Request) -> httpx.Response:
        sent.append(request)
        return httpx.Response(500)

    data = {
        "database_url": f"sqlite:///{tmp_path / 'db.sqlite'}",
        "upstreams": [{"name": "local", "base_url": "http://up.test/v1", "context_window": 4096}],
        **overrides,
    }
    return TestClient(
        create_app(Settings(**data), transport=httpx.MockTransport(upstream)),
        base_url=LOCAL,
        client=("127.0.0.1", 50000),  # a gateway on the same host: retrieve is the audit's
    )


def test_headroom_shaped_call_gets_a_view_that_fits_with_valid_pairs(tmp_path: Path) -> None:
    sent: list[httpx.Request] = []
    messages = history(30)
    with client_for(tmp_path, sent) as client:
        r = client.post("/v1/compress", json={"messages": messages, "model": "any"})
    assert r.status_code == 200, r.text
    out = r.json()
    assert out["tokens_before"] > 4096 > out["budget"] >= out["tokens_after"]
    assert out["tokens_saved"] == out["tokens_before"] - out["tokens_after"]
    assert problems(out["messages"]) == []
    assert out["messages"][:2] == TASK and out["messages"][-1] == messages[-1]
    assert r.headers["x-ctxproxy-session"] == out["session"]
    assert sent == []  # nothing is ever forwarded


def test_gateway_window_and_session_header_are_honoured(tmp_path: Path) -> None:
    """agentgateway-shaped: a provider's model name no upstream serves, the window in the body,
    the session in a header, tools and unknown fields beside the messages."""
    sent: list[httpx.Request] = []
    tools = [{"type": "function", "function": {"name": "bash", "parameters": {"type": "object"}}}]
    body = {
        "messages": history(30),
        "model": "gpt-4o",
        "context_window": 2048,
        "tools": tools,
        "temperature": 0.2,
    }
    ups = [{"name": "local", "base_url": "http://up.test/v1", "models": ["llama"]}]
    with client_for(tmp_path, sent, upstreams=ups) as client:
        r = client.post("/v1/compress", json=body, headers={"x-session-id": "gw-1"})
        again = client.post("/v1/compress", json=body, headers={"x-session-id": "gw-1"})
        audit = client.app.state.services.store.page_exchanges("gw-1", 10, 0)
    out = r.json()
    assert out["session"] == "gw-1" and out["context_window"] == 2048
    assert out["tokens_after"] <= out["budget"] < 2048 < out["tokens_before"]
    assert problems(out["messages"]) == []
    assert again.json()["messages"] == out["messages"]  # the same bytes for the same input
    assert audit.total == 2 and sent == []


def test_retrieve_returns_an_original_byte_for_byte(tmp_path: Path) -> None:
    """What a view leaves out or folds, named by its hash as placeholders name it."""
    messages = history(30)
    with client_for(tmp_path, []) as client:
        out = client.post("/v1/compress", json={"messages": messages, "model": "m"}).json()
        assert len(out["messages"]) < len(messages)
        refs = [original_ref(m) for m in messages if m["role"] == "tool"]
        refs += re.findall(r"/messages/[0-9a-f]{16}", json.dumps(out["messages"]))
        got = [client.get(f"/v1/retrieve{ref}") for ref in refs]
        bare = client.get(f"/v1/retrieve/{refs[0].rsplit('/', 1)[1]}")
        missing = client.get("/v1/retrieve/" + "0" * 16)
        bad = client.get("/v1/retrieve/zz")
    originals = {json.dumps(m["content"]) for m in messages}
    for r in got:
        assert r.status_code == 200
        assert json.dumps(r.json()["content"]) in originals
    assert [r.json()["content"] for r in got[:5]] == [
        m["content"] for m in messages if m["role"] == "tool"
    ][:5]
    assert bare.json() == got[0].json()
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "not_found"
    assert bad.status_code == 400 and "error" in bad.json()


def test_bad_calls_are_4xx_in_the_openai_envelope(tmp_path: Path) -> None:
    ups = [{"name": "local", "base_url": "http://up.test/v1", "models": ["*"]}]
    with client_for(tmp_path, [], upstreams=ups) as client:
        no_messages = client.post("/v1/compress", json={"model": "m"})
        bad_window = client.post(
            "/v1/compress", json={"model": "m", "messages": TASK, "context_window": "big"}
        )
        no_window = client.post("/v1/compress", json={"model": "m", "messages": TASK})
        orphan = client.post(
            "/v1/compress",
            json={
                "model": "m",
                "context_window": 4096,
                "messages": [*TASK, {"role": "tool", "tool_call_id": "x", "content": "1"}],
            },
        )
    for r in (no_messages, bad_window, no_window, orphan):
        assert 400 <= r.status_code < 500, r.text
        assert set(r.json()["error"]) >= {"message", "type"}
    assert bad_window.json()["error"]["param"] == "context_window"
    assert "context_window" in no_window.json()["error"]["message"]


def test_too_long_even_compacted_is_a_400_that_says_so(tmp_path: Path) -> None:
    huge = [*TASK[:1], {"role": "user", "content": "word " * 6000}]
    with client_for(tmp_path, []) as client:
        r = client.post(
            "/v1/compress", json={"messages": huge, "model": "m", "context_window": 1024}
        )
    assert r.status_code == 400
    assert r.json()["error"]["code"] == "context_length_exceeded"


def chatty(statements: int) -> list[dict]:
    """Many short user statements, each acknowledged: what a gateway's long chat looks like."""
    msgs = [*TASK, {"role": "assistant", "content": "Sure."}]
    for i in range(statements):
        msgs += [
            {"role": "user", "content": f"Remember that the code for box {i} is {1000 + i * 7}."},
            {"role": "assistant", "content": "Noted."},
        ]
    return [*msgs, {"role": "user", "content": "Which codes did I give you?"}]


def test_a_one_shot_view_fills_the_room_unless_headroom_is_asked(tmp_path: Path) -> None:
    sent: list[httpx.Request] = []
    body = {"messages": chatty(200), "model": "any", "context_window": 2048}
    with client_for(tmp_path, sent) as client:
        filled = client.post("/v1/compress", json=body, headers={"x-session-id": "a"}).json()
        roomy = client.post(
            "/v1/compress", json={**body, "headroom": 0.5}, headers={"x-session-id": "b"}
        ).json()
    assert filled["tokens_after"] >= 0.9 * filled["budget"] >= filled["tokens_after"] * 0.9
    assert filled["tokens_after"] <= filled["budget"]
    assert roomy["tokens_after"] < 0.75 * roomy["budget"]
    assert problems(filled["messages"]) == [] and problems(roomy["messages"]) == []

    def codes(view: list[dict]) -> int:
        text = json.dumps(view)
        return sum(f"box {i} is" in text for i in range(200))

    assert codes(filled["messages"]) > codes(roomy["messages"])


def test_headroom_out_of_range_is_a_400_naming_it(tmp_path: Path) -> None:
    sent: list[httpx.Request] = []
    with client_for(tmp_path, sent) as client:
        for bad in (1.5, -0.1, "half", True):
            body = {"messages": TASK, "model": "any", "headroom": bad}
            r = client.post("/v1/compress", json=body)
            assert r.status_code == 400 and r.json()["error"]["param"] == "headroom", bad


def test_the_openapi_document_names_the_compress_fields(tmp_path: Path) -> None:
    with client_for(tmp_path, []) as client:
        doc = client.get("/openapi.json").json()
    schema = doc["paths"]["/v1/compress"]["post"]["requestBody"]["content"]["application/json"]
    fields = schema["schema"]["properties"]
    assert fields["headroom"]["default"] == 0 and "context_window" in fields
