"""Observe mode's edges: a Responses conversation continued by previous_response_id, a client's
unpaired tool result, identity fields, and who may choose the mode by header."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from tests.app.test_observe_mode import LOCAL, LOOPBACK, client_bytes, make_app

OBSERVE = {"content-type": "application/json", "x-ctxproxy-mode": "observe"}
RESPONSES = "/v1/responses"


def _events(text: str) -> list[dict[str, Any]]:
    return [json.loads(line[5:]) for line in text.splitlines() if line.startswith("data:")]


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
def test_observed_responses_conversation_keeps_the_upstreams_ids(
    tmp_path: Path, stream: bool
) -> None:
    """The client is given the upstream's own id and names it next turn; the upstream gets
    that turn byte for byte, its own id in it."""
    seen: list[tuple[str, bytes]] = []
    first_raw = client_bytes(RESPONSES, stream, turns=2)
    with TestClient(make_app(tmp_path, seen), base_url=LOCAL, client=LOOPBACK) as client:
        first = client.post(RESPONSES, content=first_raw, headers=OBSERVE)
        assert first.status_code == 200, first.text
        if stream:
            answer_id = _events(first.text)[0]["response"]["id"]
        else:
            answer_id = first.json()["id"]
        assert answer_id == "resp_1"  # the upstream's, not ctxproxy's sealed one
        body = {"model": "m", "stream": stream, "previous_response_id": answer_id}
        second_raw = json.dumps(body | {"input": "And then?"}, indent=3).encode()
        second = client.post(RESPONSES, content=second_raw, headers=OBSERVE)
        assert second.status_code == 200, second.text
        session = second.headers["x-ctxproxy-session"]
        detail = client.get(f"/sessions/{session}/exchanges/1").json()
    assert [s for _, s in seen] == [first_raw, second_raw]
    # The record keeps the upstream's id the turn continued
    assert detail["request"]["ctxproxy_upstream_previous_response_id"] == "resp_1"


def test_observed_turn_continued_from_ctxproxys_own_id_carries_the_conversation(
    tmp_path: Path,
) -> None:
    """An id ctxproxy made (a compacted turn before) means nothing to the upstream: the
    observed turn goes with the stored conversation instead, natively."""
    seen: list[tuple[str, bytes]] = []
    with TestClient(make_app(tmp_path, seen), base_url=LOCAL, client=LOOPBACK) as client:
        raw = client_bytes(RESPONSES, False, turns=1)
        first = client.post(RESPONSES, content=raw, headers={"content-type": "application/json"})
        ours = first.json()["id"]
        assert ours != "resp_1"
        body = {"model": "m", "previous_response_id": ours, "input": "And then?"}
        second = client.post(RESPONSES, json=body, headers={"x-ctxproxy-mode": "observe"})
        assert second.status_code == 200, second.text
    path, sent = seen[-1]
    forwarded = json.loads(sent)
    assert path == RESPONSES and "previous_response_id" not in forwarded
    assert len(forwarded["input"]) > 3  # the earlier turns, then the new input


def test_observed_unpaired_tool_result_goes_upstream_as_sent(tmp_path: Path) -> None:
    seen: list[tuple[str, bytes]] = []
    path = "/v1/chat/completions"
    body = json.loads(client_bytes(path, False, turns=2))
    body["messages"].insert(2, {"role": "tool", "tool_call_id": "nobody", "content": "stray"})
    raw = json.dumps(body, indent=2).encode()
    with TestClient(make_app(tmp_path, seen), base_url=LOCAL, client=LOOPBACK) as client:
        r = client.post(path, content=raw, headers=OBSERVE)
        assert r.status_code == 200, r.text
        compacted = client.post(path, content=raw, headers={"content-type": "application/json"})
    assert seen == [(path, raw)]
    assert compacted.status_code == 400  # compact mode's policy (reject) is unchanged


IDENTITY = {
    "/v1/chat/completions": {"user": "device-42", "safety_identifier": "acct-7"},
    "/v1/messages": {"metadata": {"user_id": "device-42", "keep": "this"}},
    RESPONSES: {"user": "device-42"},
}


@pytest.mark.parametrize("forward", [False, True], ids=["kept", "forwarded"])
@pytest.mark.parametrize("path", list(IDENTITY))
def test_observed_identity_fields_follow_forward_client_identity(
    tmp_path: Path, path: str, forward: bool
) -> None:
    seen: list[tuple[str, bytes]] = []
    body = json.loads(client_bytes(path, False, turns=2)) | IDENTITY[path]
    raw = json.dumps(body, indent=1).encode()
    app = make_app(tmp_path, seen, forward_client_identity=forward)
    with TestClient(app, base_url=LOCAL, client=LOOPBACK) as client:
        r = client.post(path, content=raw, headers=OBSERVE)
        assert r.status_code == 200, r.text
    [(_, sent)] = seen
    if forward:
        assert sent == raw
        return
    assert b"device-42" not in sent and b"acct-7" not in sent
    forwarded = json.loads(sent)
    expected = {k: v for k, v in body.items() if k not in ("user", "safety_identifier")}
    if path == "/v1/messages":
        expected["metadata"] = {"keep": "this"}
    assert forwarded == expected  # the rest as the client sent it


@pytest.mark.parametrize(
    ("settings", "auth", "client_at", "status"),
    [
        ({"api_keys": ["sk-a"]}, "sk-a", LOOPBACK, 403),  # a client key, by default
        ({"api_keys": ["sk-a"], "mode_switch": "clients"}, "sk-a", LOOPBACK, 200),
        ({"api_keys": ["sk-a", "sk-admin"], "admin_key": "sk-admin"}, "sk-admin", LOOPBACK, 200),
        ({}, None, LOOPBACK, 200),  # no keys: the operator, on loopback
        ({}, None, ("10.1.2.3", 5000), 403),  # no keys, not loopback: not the operator
    ],
    ids=["client-key", "clients-may", "admin-key", "loopback", "remote"],
)
def test_who_may_choose_the_mode_by_header(
    tmp_path: Path, settings: dict, auth: str | None, client_at: tuple, status: int
) -> None:
    seen: list[tuple[str, bytes]] = []
    path = "/v1/chat/completions"
    raw = client_bytes(path, False, turns=2)
    headers = OBSERVE | ({"authorization": f"Bearer {auth}"} if auth else {})
    app = make_app(tmp_path, seen, **settings)
    with TestClient(app, base_url=LOCAL, client=client_at) as client:
        r = client.post(path, content=raw, headers=headers)
        # Asking for the configured mode is no switch: anyone may
        plain = client.post(path, content=raw, headers={**headers, "x-ctxproxy-mode": "compact"})
    assert r.status_code == status, r.text
    assert plain.status_code == 200, plain.text
    if status == 200:
        assert r.headers["x-ctxproxy-mode"] == "observe" and seen[0] == (path, raw)
    else:
        assert r.json()["error"]["param"] == "x-ctxproxy-mode" and len(seen) == 1
