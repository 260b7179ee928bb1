"""Property-based fuzzing of the three request schemas: near-valid and invalid bodies for
chat completions, Messages (and count_tokens) and Responses, never a 5xx of ctxproxy's own.

Each body starts as a valid request that uses every field the API documents, then hypothesis
changes it: a value anywhere replaced by one of another type (huge numbers, deep nesting,
unicode, NUL), a field dropped, a field added. The upstream is the scripted one (model echo).
"""

from __future__ import annotations

import base64
import copy
import os
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from starlette.testclient import TestClient

from proxy.app import create_app
from tests.conftest import make_settings

TOOL = {"type": "function", "function": {"name": "read_file", "parameters": {"type": "object"}}}
IMAGE = "data:image/png;base64,iVBORw0KGgo="

CHAT = {
    "model": "echo",
    "messages": [
        {"role": "system", "content": "You are terse."},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "hi"},
                {"type": "image_url", "image_url": {"url": IMAGE}},
            ],
        },
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "read_file", "arguments": '{"path": "a"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "text"},
        {"role": "user", "content": "go on", "name": "me"},
    ],
    "tools": [TOOL],
    "tool_choice": "auto",
    "stream": False,
    "stream_options": {"include_usage": True},
    "max_tokens": 50,
    "max_completion_tokens": 50,
    "temperature": 0.5,
    "n": 1,
    "user": "u",
    "metadata": {"k": "v"},
}

MESSAGES = {
    "model": "echo",
    "max_tokens": 50,
    "system": [{"type": "text", "text": "You are terse.", "cache_control": {"type": "ephemeral"}}],
    "messages": [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "hi"},
                {
                    "type": "image",
                    "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="},
                },
                {"type": "document", "title": "d", "source": {"type": "text", "data": "x"}},
            ],
        },
        {
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": "hm", "signature": "s"},
                {"type": "text", "text": "Reading."},
                {"type": "tool_use", "id": "toolu_1", "name": "read_file", "input": {"path": "a"}},
            ],
        },
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_1",
                    "is_error": False,
                    "content": [{"type": "text", "text": "text"}],
                },
                {"type": "image", "source": {"type": "url", "url": "https://example.com/a.png"}},
            ],
        },
        {"role": "assistant", "content": "ok"},
        {"role": "user", "content": "go on"},
    ],
    "tools": [{"name": "read_file", "description": "d", "input_schema": {"type": "object"}}],
    "tool_choice": {"type": "auto", "disable_parallel_tool_use": False},
    "metadata": {"user_id": "u"},
    "stop_sequences": ["x"],
    "stream": False,
    "temperature": 0.5,
    "top_p": 0.9,
    "top_k": 5,
    "thinking": {"type": "enabled", "budget_tokens": 1024},
}

RESPONSES = {
    "model": "echo",
    "instructions": "You are terse.",
    "input": [
        {"role": "developer", "content": "Be brief."},
        {
            "type": "message",
            "role": "user",
            "content": [
                {"type": "input_text", "text": "hi"},
                {"type": "input_image", "image_url": IMAGE},
            ],
        },
        {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "s"}]},
        {
            "type": "function_call",
            "call_id": "c1",
            "name": "read_file",
            "arguments": '{"path": "a"}',
        },
        {"type": "function_call_output", "call_id": "c1", "output": "text"},
        {
            "type": "message",
            "role": "assistant",
            "content": [{"type": "output_text", "text": "ok"}],
        },
        {"role": "user", "content": "go on"},
    ],
    "tools": [{"type": "function", "name": "read_file", "parameters": {"type": "object"}}],
    "tool_choice": "auto",
    "previous_response_id": None,
    "store": True,
    "stream": False,
    "max_output_tokens": 50,
    "temperature": 0.5,
    "text": {"format": {"type": "text"}},
    "reasoning": {"effort": "low"},
    "parallel_tool_calls": True,
    "metadata": {"k": "v"},
}

BASES = {
    "/v1/chat/completions": CHAT,
    "/v1/messages": MESSAGES,
    "/v1/messages/count_tokens": MESSAGES,
    "/v1/responses": RESPONSES,
}

_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.sampled_from([0, -1, 2**63, 2**64, 10**400, 1e308, -0.0])
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20)
    | st.sampled_from(["", "\x00", "\ud7ff\U0010ffff", "é" * 50, "resp_" + "A" * 40, "echo"])
)
VALUES = st.recursive(
    _scalars,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=10), inner, max_size=3)
    ),
    max_leaves=6,
) | st.integers(1, 300).map(lambda depth: _nested(depth))


def _nested(depth: int) -> Any:
    value: Any = "x"
    for n in range(depth):
        value = [value] if n % 2 else {"content": value}
    return value


def _paths(node: Any, at: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every place in a body a value sits, the body's own keys and items included."""
    out = [at]
    if isinstance(node, dict):
        for k, v in node.items():
            out += _paths(v, (*at, k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            out += _paths(v, (*at, i))
    return out


@st.composite
def bodies(draw: st.DrawFn, base: dict[str, Any]) -> Any:
    """A valid body with one to three changes: a value replaced, a key dropped or added."""
    body: Any = copy.deepcopy(base)
    for _ in range(draw(st.integers(1, 3))):
        paths = _paths(body)
        at = draw(st.sampled_from(paths))
        change = draw(st.sampled_from(["replace", "drop", "add"]))
        if not at:
            body = draw(VALUES) if change == "replace" else body
            continue
        parent = body
        for step in at[:-1]:
            parent = parent[step]
        key = at[-1]
        if change == "replace":
            parent[key] = draw(VALUES)
        elif change == "drop":
            del parent[key]
        elif isinstance(parent, dict):
            parent[draw(st.text(max_size=12))] = draw(VALUES)
        else:
            parent.insert(draw(st.integers(0, len(parent))), draw(VALUES))
    return body


@pytest.fixture(scope="module")
def client(scripted_server, tmp_path_factory) -> Iterator[TestClient]:
    _, upstream = scripted_server
    url = upstream.url + "/v1"
    cfg = make_settings(
        tmp_path_factory.mktemp("fuzz"),
        url,
        upstreams=[{"name": "scripted", "base_url": url, "read_timeout": 5}],
    )
    with TestClient(
        create_app(cfg), base_url="http://127.0.0.1", raise_server_exceptions=False
    ) as c:
        yield c


RAN: dict[str, int] = {}
EXAMPLES = int(os.environ.get("CTXPROXY_FUZZ_EXAMPLES", "150"))  # per API; ~6 s per 150


@pytest.mark.parametrize("path", list(BASES))
def test_no_body_gets_a_5xx(client: TestClient, path: str) -> None:
    base = BASES[path]
    failures: list[str] = []
    statuses: Counter[int] = Counter()
    RAN[path] = 0
    assert client.post(path, json=base).status_code == 200  # the unchanged body is valid

    @given(body=bodies(base))
    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    def fuzz(body: Any) -> None:
        RAN[path] += 1
        r = client.post(path, json=body, headers={"X-Session-Id": f"fuzz-{RAN[path] % 7}"})
        statuses[r.status_code] += 1
        if r.status_code >= 500:
            failures.append(f"{r.status_code} {r.text[:300]}\n{body!r}"[:2000])
        elif r.status_code >= 400:  # in the API's own envelope
            assert "error" in r.json(), r.text

    fuzz()
    print(path, RAN[path], "bodies:", dict(statuses))
    assert statuses[200] >= 10 and statuses[400] >= 10  # both kinds were tried
    assert not failures, f"{len(failures)} of {RAN[path]} bodies: " + "\n\n".join(failures[:3])


def _forged(seq: str) -> str:
    """A response id as ctxproxy makes them, naming a sequence no exchange has."""
    return "resp_" + base64.urlsafe_b64encode(f"fp-x/{seq}".encode()).decode().rstrip("=")


def _anthropic(content: Any) -> dict[str, Any]:
    return {"model": "echo", "max_tokens": 5, "messages": [{"role": "user", "content": content}]}


KNOWN: list[tuple[str, dict[str, Any], str]] = [
    ("/v1/messages", _anthropic([{"type": "text", "text": {"a": 1}}]), "content.0.text"),
    ("/v1/messages", _anthropic([{"type": "image", "source": "x"}]), "content.0.source"),
    ("/v1/messages/count_tokens", _anthropic([{"type": "text", "text": [1]}]), "0.text"),
    ("/v1/messages", {**_anthropic("hi"), "model": None}, "model"),
    ("/v1/messages", {**_anthropic("hi"), "tool_choice": {"type": ["auto"]}}, "tool_choice"),
    ("/v1/responses", {"model": "echo", "input": "hi", "previous_response_id": 5}, "string"),
    (
        "/v1/responses",
        {"model": "echo", "input": "hi", "previous_response_id": _forged(str(2**63))},
        "not a stored response",
    ),
    (
        "/v1/responses",
        {"model": "echo", "input": "hi", "previous_response_id": _forged("1" * 5001)},
        "not a stored response",
    ),
    (
        "/v1/responses",
        {
            "model": "echo",
            "input": [{"role": "user", "content": [{"type": "input_text", "text": [1]}]}],
        },
        "input.0.content.0.text",
    ),
]


@pytest.mark.parametrize("path, body, says", KNOWN)
def test_bodies_that_were_500s_are_400s_naming_the_field(
    client: TestClient, path: str, body: dict[str, Any], says: str
) -> None:
    r = client.post(path, json=body)
    assert r.status_code == 400, r.text
    assert says in r.json()["error"]["message"]


def test_a_tool_whose_function_is_no_object_goes_to_the_upstream_to_judge(
    client: TestClient,
) -> None:
    """It was a 500 (the recall tool check read it); now it travels as it came."""
    body = {**CHAT, "tools": [{"type": "function", "function": ["read_file"]}]}
    r = client.post("/v1/chat/completions", json=body)
    assert r.status_code == 200 and r.json()["choices"][0]["message"]["content"] == "echo: go on"
