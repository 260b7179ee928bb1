"""No answer names a session the client did not name itself, unless keys scope it: a stranger
quoting another conversation is filed with it (as aider's summaries are), and no route, header,
body, answer id or error tells it which session that is."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from proxy.testing.scripted import Script
from proxy.testing.servers import ServerThread

TASK = "Fix the failing test in the parser module, it raises on empty input."
SYSTEM = "You are a coding agent working in a repository with a test suite."
QUOTER = "Summarise the following text in one sentence."
HEADER = "x-ctxproxy-session"


def post(proxy: ServerThread, path: str, body: dict[str, Any], **headers: str) -> httpx.Response:
    return httpx.post(proxy.url + path, json=body, headers=headers, timeout=30)


def conversation(proxy: ServerThread, **headers: str) -> str:
    """A conversation under way; the session it was told."""
    body = {
        "model": "echo",
        "messages": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": TASK}],
    }
    r = post(proxy, "/v1/chat/completions", body, **headers)
    assert r.status_code == 200, r.text
    return r.headers[HEADER]


def quoting_chat() -> dict[str, Any]:
    """A tool-less request quoting the conversation's answer: a side request about it."""
    return {
        "model": "echo",
        "messages": [
            {"role": "system", "content": QUOTER},
            {"role": "user", "content": "echo: " + TASK},
        ],
    }


def filed_in_one_session(proxy: ServerThread) -> None:
    assert httpx.get(proxy.url + "/sessions").json()["total"] == 1


def test_compress_tells_a_stranger_nothing_of_the_session_it_quotes(
    proxy: ServerThread, script: Script
) -> None:
    session = conversation(proxy)
    r = post(proxy, "/v1/compress", {**quoting_chat(), "context_window": 8000})
    assert r.status_code == 200, r.text
    assert HEADER not in r.headers
    assert r.json()["session"] is None
    assert session not in r.text
    filed_in_one_session(proxy)


def test_compress_tells_a_session_its_client_named_or_its_own_fingerprint(
    proxy: ServerThread, script: Script
) -> None:
    named = post(
        proxy, "/v1/compress", {**quoting_chat(), "context_window": 8000}, **{"x-session-id": "n1"}
    )
    assert named.headers[HEADER] == "n1" and named.json()["session"] == "n1"
    own = post(proxy, "/v1/compress", {**quoting_chat(), "context_window": 8000})
    assert own.headers[HEADER] == own.json()["session"] != "n1"


def test_messages_tells_a_stranger_nothing(proxy: ServerThread, script: Script) -> None:
    session = conversation(proxy)
    body = {
        "model": "echo",
        "max_tokens": 64,
        "system": QUOTER,
        "messages": [{"role": "user", "content": "echo: " + TASK}],
    }
    r = post(proxy, "/v1/messages", body)
    assert r.status_code == 200, r.text
    assert HEADER not in r.headers and session not in r.text
    filed_in_one_session(proxy)


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
def test_responses_continued_from_a_strangers_id_tells_nothing(
    proxy: ServerThread, script: Script, stream: bool
) -> None:
    session = conversation(proxy)
    body = {"model": "echo", "instructions": QUOTER, "input": "echo: " + TASK}
    first = post(proxy, "/v1/responses", body)
    assert first.status_code == 200 and HEADER not in first.headers
    again = {**body, "input": "And in French?", "previous_response_id": first.json()["id"]}
    second = post(proxy, "/v1/responses", again | {"stream": stream})
    assert second.status_code == 200, second.text
    assert HEADER not in second.headers and session not in second.text
    # ... and so on down the chain its answers' ids make
    last_id = _answer_id(second, stream)
    third = post(proxy, "/v1/responses", {**again, "previous_response_id": last_id})
    assert third.status_code == 200, third.text
    assert HEADER not in third.headers and session not in third.text
    filed_in_one_session(proxy)


def test_responses_continued_from_its_own_id_is_still_told(
    proxy: ServerThread, script: Script
) -> None:
    body = {"model": "echo", "instructions": SYSTEM, "input": TASK}
    first = post(proxy, "/v1/responses", body)
    session = first.headers[HEADER]
    again = {**body, "input": "Go on.", "previous_response_id": first.json()["id"]}
    assert post(proxy, "/v1/responses", again).headers[HEADER] == session


def test_a_strangers_refusal_tells_nothing(start_proxy, settings_for, script: Script) -> None:
    """An error answer (here a model whose window is too small for the request) is no way out."""
    [upstream] = settings_for().upstreams
    small = {**upstream.model_dump(), "name": "small", "models": ["tiny"], "context_window": 300}
    proxy = start_proxy(settings_for(upstreams=[small, upstream.model_dump()]))
    lines = "\n".join(
        f"Step {i}: check the parser's handling of case number {i}." for i in range(60)
    )
    body = {"model": "echo", "messages": [{"role": "user", "content": lines}]}
    r = post(proxy, "/v1/chat/completions", body)
    session = r.headers[HEADER]
    quoting = quoting_chat() | {"model": "tiny"}
    quoting["messages"][1]["content"] = lines
    r = post(proxy, "/v1/chat/completions", quoting)
    assert r.status_code == 400, r.text
    assert r.json()["error"]["code"] == "context_length_exceeded"
    assert HEADER not in r.headers and session not in r.text
    filed_in_one_session(proxy)


def test_with_keys_a_side_request_is_told_its_own_keys_session(
    start_proxy, settings_for, script: Script
) -> None:
    proxy = start_proxy(settings_for(api_keys=["sk-alice"]))
    auth = {"Authorization": "Bearer sk-alice"}
    session = conversation(proxy, **auth)
    r = post(proxy, "/v1/compress", {**quoting_chat(), "context_window": 8000}, **auth)
    assert r.headers[HEADER] == session == r.json()["session"]


def _answer_id(r: httpx.Response, stream: bool) -> str:
    if not stream:
        return r.json()["id"]
    import json

    for line in r.text.splitlines():
        if line.startswith("data:") and '"response.completed"' in line:
            return json.loads(line.removeprefix("data:"))["response"]["id"]
    raise AssertionError(r.text[-500:])
