"""Observe mode: the upstream gets the client's request byte for byte, on every API, streamed
or not, while the audit keeps the view ctxproxy would have sent, marked as observed."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient

from proxy.app import create_app
from proxy.settings import Settings
from proxy.testing.histories import SYSTEM, TASK, agent_turn

LOCAL = "http://localhost"
LOOPBACK = ("127.0.0.1", 50000)  # the audit API answers loopback clients
WINDOW = 2048  # small enough that this history must be compacted to fit


def _sse(events: list[tuple[str | None, dict[str, Any] | str]]) -> bytes:
    out = b""
    for name, data in events:
        if name:
            out += f"event: {name}\n".encode()
        text = data if isinstance(data, str) else json.dumps(data)
        out += f"data: {text}\n\n".encode()
    return out


USAGE = {"prompt_tokens": 900, "completion_tokens": 1, "total_tokens": 901}
CHAT = {
    "id": "c1",
    "object": "chat.completion",
    "model": "m",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"}}],
    "usage": {**USAGE, "prompt_tokens_details": {"cached_tokens": 640}},
}
MESSAGE = {
    "id": "msg_1",
    "type": "message",
    "role": "assistant",
    "model": "m",
    "content": [{"type": "text", "text": "ok"}],
    "stop_reason": "end_turn",
    "stop_sequence": None,
    "usage": {"input_tokens": 260, "cache_read_input_tokens": 640, "output_tokens": 1},
}
RESPONSE = {
    "id": "resp_1",
    "object": "response",
    "status": "completed",
    "model": "m",
    "output": [
        {
            "type": "message",
            "id": "m1",
            "role": "assistant",
            "status": "completed",
            "content": [{"type": "output_text", "text": "ok", "annotations": []}],
        }
    ],
    "usage": {
        "input_tokens": 900,
        "input_tokens_details": {"cached_tokens": 640},
        "output_tokens": 1,
        "total_tokens": 901,
    },
}
STREAMS = {
    "/v1/chat/completions": _sse(
        [
            (
                None,
                {
                    **CHAT,
                    "object": "chat.completion.chunk",
                    "choices": [{"index": 0, "delta": {"role": "assistant", "content": "ok"}}],
                }
                | {"usage": None},
            ),
            (
                None,
                {
                    "id": "c1",
                    "object": "chat.completion.chunk",
                    "model": "m",
                    "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}],
                    "usage": CHAT["usage"],
                },
            ),
            (None, "[DONE]"),
        ]
    ),
    "/v1/messages": _sse(
        [
            (
                "message_start",
                {
                    "type": "message_start",
                    "message": {**MESSAGE, "content": [], "stop_reason": None},
                },
            ),
            (
                "content_block_start",
                {
                    "type": "content_block_start",
                    "index": 0,
                    "content_block": {"type": "text", "text": ""},
                },
            ),
            (
                "content_block_delta",
                {
                    "type": "content_block_delta",
                    "index": 0,
                    "delta": {"type": "text_delta", "text": "ok"},
                },
            ),
            ("content_block_stop", {"type": "content_block_stop", "index": 0}),
            (
                "message_delta",
                {
                    "type": "message_delta",
                    "delta": {"stop_reason": "end_turn"},
                    "usage": {"output_tokens": 1},
                },
            ),
            ("message_stop", {"type": "message_stop"}),
        ]
    ),
    "/v1/responses": _sse(
        [
            (
                "response.created",
                {
                    "type": "response.created",
                    "response": {**RESPONSE, "status": "in_progress", "output": []},
                },
            ),
            (
                "response.output_text.delta",
                {
                    "type": "response.output_text.delta",
                    "output_index": 0,
                    "content_index": 0,
                    "item_id": "m1",
                    "delta": "ok",
                },
            ),
            ("response.completed", {"type": "response.completed", "response": RESPONSE}),
        ]
    ),
}
WHOLE = {"/v1/chat/completions": CHAT, "/v1/messages": MESSAGE, "/v1/responses": RESPONSE}


def _chat_history(turns: int) -> list[dict[str, Any]]:
    messages = [SYSTEM, TASK]
    for t in range(turns):
        messages += agent_turn(t)
    return [*messages, {"role": "user", "content": "Go on — and say “done” when it passes."}]


def _messages_history(turns: int) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = [{"role": "user", "content": TASK["content"]}]
    for t in range(turns):
        [call, result] = agent_turn(t)
        tid = call["tool_calls"][0]["id"]
        out.append(
            {
                "role": "assistant",
                "content": [
                    {"type": "tool_use", "id": tid, "name": "run_tests", "input": {"path": "tests"}}
                ],
            }
        )
        out.append(
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": tid, "content": result["content"]}
                ],
            }
        )
    return [*out, {"role": "user", "content": "Go on — say “done” when it passes."}]


def _responses_input(turns: int) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = [{"role": "user", "content": TASK["content"]}]
    for t in range(turns):
        [call, result] = agent_turn(t)
        tid = call["tool_calls"][0]["id"]
        out.append(
            {
                "type": "function_call",
                "call_id": tid,
                "name": "run_tests",
                "arguments": '{"path": "tests"}',
            }
        )
        out.append({"type": "function_call_output", "call_id": tid, "output": result["content"]})
    return [*out, {"role": "user", "content": "Go on — say “done” when it passes."}]


def client_bytes(path: str, stream: bool, turns: int = 12) -> bytes:
    """The client's request as it would write it: key order, spacing and escapes of its own,
    which any re-encoding would change."""
    if path == "/v1/chat/completions":
        body: dict[str, Any] = {"model": "m", "stream": stream, "messages": _chat_history(turns)}
    elif path == "/v1/messages":
        body = {
            "model": "m",
            "max_tokens": 64,
            "stream": stream,
            "system": SYSTEM["content"],
            "messages": _messages_history(turns),
        }
    else:
        body = {"model": "m", "stream": stream, "input": _responses_input(turns)}
    return json.dumps(body, indent=1, ensure_ascii=True).encode()


class Chunks(httpx.AsyncByteStream):
    """An answer streamed event by event, as a server sends it (a Response given bytes
    would count as read already)."""

    def __init__(self, data: bytes) -> None:
        self.events = [e + b"\n\n" for e in data.split(b"\n\n") if e]

    async def __aiter__(self):  # type: ignore[override]
        for event in self.events:
            yield event


def make_app(tmp_path: Path, seen: list[tuple[str, bytes]], **settings: Any) -> Any:
    def upstream(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/v1/models":
            return httpx.Response(404)
        seen.append((request.url.path, request.content))
        body = json.loads(request.content)
        if body.get("stream"):
            headers = {"content-type": "text/event-stream"}
            return httpx.Response(200, stream=Chunks(STREAMS[request.url.path]), headers=headers)
        return httpx.Response(200, json=WHOLE[request.url.path])

    return create_app(
        Settings(
            database_url=f"sqlite:///{tmp_path / 'db.sqlite'}",
            upstreams=[
                {
                    "name": "u",
                    "kind": "llamacpp",  # serves all three APIs natively
                    "base_url": "http://up.test/v1",
                    "context_window": WINDOW,
                }
            ],
            **settings,
        ),
        transport=httpx.MockTransport(upstream),
    )


PATHS = list(WHOLE)


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
@pytest.mark.parametrize("path", PATHS)
def test_observed_request_goes_upstream_byte_for_byte(
    tmp_path: Path, path: str, stream: bool
) -> None:
    seen: list[tuple[str, bytes]] = []
    raw = client_bytes(path, stream)
    headers = {"content-type": "application/json", "x-ctxproxy-mode": "observe"}
    with TestClient(make_app(tmp_path, seen), base_url=LOCAL, client=LOOPBACK) as client:
        r = client.post(path, content=raw, headers=headers)
        assert r.status_code == 200, r.text
        assert "ok" in r.text
        assert r.headers["x-ctxproxy-mode"] == "observe"
        session = r.headers["x-ctxproxy-session"]
        [x] = client.get(f"/sessions/{session}/exchanges").json()["data"]
        detail = client.get(f"/sessions/{session}/exchanges/{x['seq']}").json()
    assert seen == [(path, raw)]  # the very bytes, to the client's own API's path
    # ... while the audit holds the view ctxproxy would have sent, which is smaller
    assert x["observed"] is True
    assert x["phases"], "the would-be view was compacted"
    assert x["tokens_compiled"] < x["tokens_original"]
    assert x["tokens_compiled"] <= WINDOW
    would_be = detail["compiled_request"]["messages"]
    assert len(would_be) < len(detail["request"]["messages"])
    assert x["cached_tokens"] == 640  # what the upstream reported, in each API's own terms


@pytest.mark.parametrize("path", PATHS)
def test_compacting_sends_the_view_not_the_bytes(tmp_path: Path, path: str) -> None:
    """The control: without observe mode the same request goes compacted."""
    seen: list[tuple[str, bytes]] = []
    raw = client_bytes(path, stream=False)
    with TestClient(make_app(tmp_path, seen), base_url=LOCAL, client=LOOPBACK) as client:
        r = client.post(path, content=raw, headers={"content-type": "application/json"})
        assert r.status_code == 200, r.text
        assert "x-ctxproxy-mode" not in r.headers
        [x] = client.get(f"/sessions/{r.headers['x-ctxproxy-session']}/exchanges").json()["data"]
    [(_, sent)] = seen
    assert len(sent) < len(raw)
    assert x["observed"] is False


def test_configured_mode_observes_every_exchange_and_a_header_can_compact(
    tmp_path: Path,
) -> None:
    seen: list[tuple[str, bytes]] = []
    path = "/v1/chat/completions"
    raw = client_bytes(path, stream=False)
    sid = {"x-session-id": "observed-session", "content-type": "application/json"}
    with TestClient(
        make_app(tmp_path, seen, mode="observe"), base_url=LOCAL, client=LOOPBACK
    ) as client:
        first = client.post(path, content=raw, headers=sid)
        body = json.loads(raw)
        body["messages"] += [
            {"role": "assistant", "content": "ok"},
            {"role": "user", "content": "and now?"},
        ]
        second_raw = json.dumps(body, indent=2).encode()
        second = client.post(path, content=second_raw, headers=sid)
        third = client.post(path, content=second_raw, headers={**sid, "x-ctxproxy-mode": "compact"})
        rows = client.get("/sessions/observed-session/exchanges").json()["data"]
        totals = client.get("/sessions/observed-session").json()["session"]["totals"]
    assert [r.status_code for r in (first, second, third)] == [200, 200, 200]
    assert [s for _, s in seen[:2]] == [raw, second_raw]
    assert seen[2][1] != second_raw  # compacted on request
    assert [x["observed"] for x in rows] == [True, True, False]
    # The second observed turn continues the first's would-be view: the same decisions
    assert rows[1]["cache_expected"] and rows[1]["cache_previous"]
    assert totals["observed"] == 2
    assert totals["net_saved"] == totals["tokens_saved"] - totals["cache_lost"]
