"""GET /v1/retrieve/{ref}: every ref a /v1/compress view names comes back, to its key only."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient

from proxy.app import create_app
from proxy.recall import refs
from proxy.settings import Settings
from proxy.testing.histories import PYTEST_REPORT, agent_turn
from proxy.testing.postgres import postgres_database
from strategies.messages import message_hash, original_ref

LOCAL = "http://localhost"
LOOPBACK = ("127.0.0.1", 50000)
FOODS = ["pasta", "rice", "soup", "bread", "tacos", "curry", "salad"]
# Anything that looks like a ref in a view's text, whatever its form: each must be one the
# resolver takes (a template such as "history:<position>" names nothing).
LOOSE = re.compile(r"(?:/messages/|history:)(?!<)[^\s\"'\][)(,;<>]+|history positions [^.]*")


def statements(n: int) -> list[dict[str, Any]]:
    """A long conversation of short user statements, each with a value, and tool work among
    them, the newest a failing test run (which a view folds), ending in a question."""
    out: list[dict[str, Any]] = [{"role": "system", "content": "You are a helpful assistant."}]
    for i in range(n):
        food, cost = FOODS[i % 7], f"${i * 3 % 97}.{i % 100:02d}"
        out.append(
            {"role": "user", "content": f"Item {i}: my {food} order #{1000 + i} cost {cost}."}
        )
        out.extend(agent_turn(i) if i % 10 == 0 else [{"role": "assistant", "content": "Noted."}])
    call = {"id": "run", "type": "function", "function": {"name": "bash", "arguments": "{}"}}
    out.append({"role": "assistant", "content": None, "tool_calls": [call]})
    out.append({"role": "tool", "tool_call_id": "run", "content": PYTEST_REPORT * 3})
    out.append({"role": "assistant", "content": "Three tests fail."})
    out.append({"role": "user", "content": "What did order #1042 cost?"})
    return out


def client_for(tmp_path: Path, client: tuple[str, int] = LOOPBACK, **settings: Any) -> TestClient:
    data = {"database_url": f"sqlite:///{tmp_path / 'db.sqlite'}", "upstreams": [], **settings}
    app = create_app(Settings(**data), transport=httpx.MockTransport(lambda r: httpx.Response(500)))
    return TestClient(app, base_url=LOCAL, client=client)


def compress(client: TestClient, messages: list[dict[str, Any]], **headers: str) -> dict[str, Any]:
    """The view at a quarter of the history's tokens."""
    body = {"messages": messages, "model": "m", "context_window": 10**6}
    whole = client.post("/v1/compress", json=body, headers={"x-session-id": "probe", **headers})
    body["context_window"] = whole.json()["tokens_before"] // 4 + 1200
    r = client.post("/v1/compress", json=body, headers=headers)
    assert r.status_code == 200, r.text
    return r.json()


def positions(ref: str) -> range:
    first, _, last = ref.removeprefix("history:").partition("-")
    return range(int(first), int(last or first) + 1)


def test_every_ref_a_forgetting_view_names_comes_back(tmp_path: Path) -> None:
    messages = statements(150)
    by_hash = {message_hash(m): m for m in messages}
    with client_for(tmp_path) as client:
        out = compress(client, messages, **{"x-session-id": "gw-1"})
        named = refs.named_in(json.dumps(out["messages"], ensure_ascii=False))
        spans = [r for r in named if r.startswith("history:")]
        singles = [f"history:{i}" for span in spans for i in positions(span)]
        # The form placeholders, cuts and ledger pointers name an original by, for each message
        # (whichever of them this view happens to fold).
        originals = [original_ref(m) for m in messages]
        asked = [*named, *singles, *originals]
        got = {
            ref: client.get(f"/v1/retrieve/{ref}", headers={"x-session-id": "gw-1"})
            for ref in asked
        }
        by_path = client.get(f"/s/gw-1/v1/retrieve/{spans[0]}")
    assert out["tokens_before"] > 3 * out["tokens_after"]
    assert spans  # it forgot, and names what
    assert len(singles) > 200  # the positions the marker names, each asked alone
    for ref, r in got.items():
        assert r.status_code == 200, (ref, r.text)
        items = r.json()["messages"]
        if ref.startswith("history:"):
            assert [m["position"] for m in items] == list(positions(ref))
            assert [m["message"] for m in items] == [messages[i] for i in positions(ref)]
        else:
            assert len(items) == 1 and by_hash[items[0]["ref"].removeprefix("/messages/")]
            assert items[0]["message"] == by_hash[items[0]["ref"].removeprefix("/messages/")]
    assert by_path.json() == got[spans[0]].json()


def test_every_ref_like_text_in_a_view_is_a_form_the_resolver_takes(tmp_path: Path) -> None:
    with client_for(tmp_path) as client:
        out = compress(client, statements(150), **{"x-session-id": "gw-1"})
    text = json.dumps(out["messages"], ensure_ascii=False)
    loose = LOOSE.findall(text)
    named = refs.named_in(text)
    assert any(s.startswith("history positions") for s in loose)
    for found in loose:
        if found.startswith("history positions"):
            listed = re.findall(r"\d+(?:-\d+)?", found)
            assert {f"history:{span}" for span in listed} <= set(named), found
        else:
            assert found in named and refs.parse(found), found


def test_another_key_gets_404_as_from_the_audit(tmp_path: Path) -> None:
    keys = {"api_keys": ["key-a", "key-b"], "admin_key": "admin"}
    a, b = {"authorization": "Bearer key-a"}, {"authorization": "Bearer key-b"}
    with client_for(tmp_path, **keys) as client:
        out = compress(client, statements(60), **a, **{"x-session-id": "gw-1"})
        span = next(r for r in refs.named_in(json.dumps(out["messages"])) if r[0] == "h")
        digest = original_ref(statements(60)[1])  # a statement the view forgot
        own = [
            client.get(f"/v1/retrieve/{r}", headers={**a, "x-session-id": "gw-1"})
            for r in (span, digest)
        ]
        other = [
            client.get(f"/v1/retrieve/{r}", headers={**b, "x-session-id": "gw-1"})
            for r in (span, digest)
        ]
        full_id = out["session"]
        stranger = client.get(f"/v1/retrieve/{span}", headers={**b, "x-session-id": full_id})
        audit = client.get(f"/messages{digest.removeprefix('/messages')}", headers=b)
        admin = client.get(
            f"/s/{full_id}/v1/retrieve/{span}", headers={"authorization": "Bearer admin"}
        )
        anthropic_style = client.get(f"/v1/retrieve/{digest}", headers={"x-api-key": "key-a"})
        nobody = client.get(f"/v1/retrieve/{digest}")
    assert [r.status_code for r in own] == [200, 200]
    assert [r.status_code for r in other] == [404, 404] == [stranger.status_code, audit.status_code]
    assert admin.status_code == 200 and admin.json()["messages"] == own[0].json()["messages"]
    assert anthropic_style.json() == own[1].json()  # the key as the Messages route takes it
    assert nobody.status_code == 401


@pytest.mark.parametrize(
    "forwarded", [{"x-forwarded-for": "203.0.113.9"}, {"forwarded": "for=1.2.3.4"}]
)
def test_without_keys_retrieve_refuses_a_remote_client_as_the_audit_does(
    tmp_path: Path, forwarded: dict[str, str]
) -> None:
    with client_for(tmp_path) as client:
        out = compress(client, statements(60), **{"x-session-id": "gw-1"})
        assert "history positions" in json.dumps(out["messages"])
        digest = original_ref(statements(60)[1])  # a statement the view forgot
        local = client.get(f"/v1/retrieve{digest}")
        remote = client.get(f"/v1/retrieve{digest}", headers=forwarded)
        audit = client.get(f"/messages{digest.removeprefix('/messages')}", headers=forwarded)
    assert local.status_code == 200
    assert remote.status_code == audit.status_code == 403
    assert remote.json()["error"]["message"] == audit.json()["error"]["message"]


def test_bad_refs_say_what_a_ref_is(tmp_path: Path) -> None:
    with client_for(tmp_path) as client:
        compress(client, statements(60), **{"x-session-id": "gw-1"})
        no_session = client.get("/v1/retrieve/history:3")
        past = client.get("/v1/retrieve/history:5000", headers={"x-session-id": "gw-1"})
        unknown = client.get("/v1/retrieve/history:3", headers={"x-session-id": "nope"})
        bad = client.get("/v1/retrieve/history:x")
        long = client.get("/v1/retrieve/" + "a" * 50_000)
    assert no_session.status_code == 400 and "X-Session-Id" in no_session.json()["error"]["message"]
    assert past.status_code == 404 and "past its end" in past.json()["error"]["message"]
    assert unknown.status_code == 404
    for r in (bad, long):
        assert r.status_code == 400 and "history:<n>" in r.json()["error"]["message"]
    assert len(long.text) < 1000


def test_the_refs_of_a_view_the_chat_route_forwards_come_back_too(tmp_path: Path) -> None:
    """Turn by turn through chat: what the upstream was sent names refs the gateway's side
    (or an operator) can fetch from the same session."""
    sent: list[dict[str, Any]] = []

    def upstream(request: httpx.Request) -> httpx.Response:
        sent.append(json.loads(request.content))
        answer = {"role": "assistant", "content": "Noted."}
        return httpx.Response(200, json={"choices": [{"index": 0, "message": answer}]})

    ups = [{"name": "local", "base_url": "http://up.test/v1", "context_window": 2048}]
    data = {"database_url": f"sqlite:///{tmp_path / 'db.sqlite'}", "upstreams": ups}
    app = create_app(Settings(**data), transport=httpx.MockTransport(upstream))
    messages = statements(60)
    with TestClient(app, base_url=LOCAL, client=LOOPBACK) as client:
        for end in (len(messages) - 40, len(messages)):  # two turns of one growing session
            body = {"model": "m", "messages": messages[:end]}
            r = client.post("/v1/chat/completions", json=body, headers={"x-session-id": "c"})
            assert r.status_code == 200, r.text
            messages.insert(end, {"role": "assistant", "content": "Noted."})
        named = refs.named_in(json.dumps(sent[-1]["messages"], ensure_ascii=False))
        got = {r: client.get(f"/v1/retrieve/{r}", headers={"x-session-id": "c"}) for r in named}
    assert any(r.startswith("history:") for r in named)
    for ref, r in got.items():
        assert r.status_code == 200, (ref, r.text)
        if ref.startswith("history:"):
            assert [m["message"] for m in r.json()["messages"]] == [
                messages[i] for i in positions(ref)
            ]


def test_positions_read_the_same_on_postgresql(tmp_path: Path) -> None:
    messages = statements(40)
    with postgres_database() as url, client_for(tmp_path, database_url=url) as client:
        out = compress(client, messages, **{"x-session-id": "gw-1"})
        span = next(r for r in refs.named_in(json.dumps(out["messages"])) if r[0] == "h")
        got = client.get(f"/v1/retrieve/{span}", headers={"x-session-id": "gw-1"})
        tail = client.get("/v1/retrieve/history:80-99999999", headers={"x-session-id": "gw-1"})
        past = client.get(f"/v1/retrieve/history:{10**17}", headers={"x-session-id": "gw-1"})
    assert [m["message"] for m in got.json()["messages"]] == [messages[i] for i in positions(span)]
    assert [m["message"] for m in tail.json()["messages"]] == messages[80:]
    assert past.status_code == 404 and "past its end" in past.json()["error"]["message"]
