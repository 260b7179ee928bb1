"""The same session replayed gives the same views, however late its answers are recorded.

The upstream reports prompt usage 15% above tiktoken's estimate, so each answer moves the
session's calibration; the client asks again the moment a stream ends. In one replay the
store records each answer slowly, in the other at once: without a defined point for the
update, the slow replay reads some states before their answer's usage and compiles
differently."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import httpx
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import StreamingResponse
from starlette.routing import Route

from proxy.compile.tokens import TokenCounter
from proxy.store.store import Store
from proxy.testing.servers import ServerThread, make_settings
from strategies.pipeline import request_points
from tests.unit.strategies.helpers import agent_history, fixture, log_lines

WINDOW = 8192
COUNTER = TokenCounter()


def counting_upstream(received: list[list[dict[str, Any]]]) -> Starlette:
    async def chat(request: Request) -> StreamingResponse:
        body = await request.json()
        received.append(body["messages"])
        prompt = int(COUNTER.count_messages(body["messages"]) * 1.15)

        def events() -> Any:
            delta = {"role": "assistant", "content": "ok"}
            for data in (
                {"choices": [{"index": 0, "delta": delta, "finish_reason": None}]},
                {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
                {"choices": [], "usage": {"prompt_tokens": prompt, "completion_tokens": 1}},
            ):
                yield f"data: {json.dumps({'id': 'x', 'model': 'm', **data})}\n\n"
            yield "data: [DONE]\n\n"

        return StreamingResponse(events(), media_type="text/event-stream")

    return Starlette(routes=[Route("/v1/chat/completions", chat, methods=["POST"])])


def replay(tmp: Path, start_proxy: Any, slow_record: bool, monkeypatch: Any) -> list[str]:
    received: list[list[dict[str, Any]]] = []
    outputs = [fixture("seed_demo.txt"), log_lines(60), "ok", fixture("pytest_failures.txt")]
    history = agent_history([outputs[i % 4] for i in range(24)])
    if slow_record:
        finish = Store.finish_exchange

        def slow(self: Store, *args: Any, **kwargs: Any) -> Any:
            time.sleep(0.3)
            return finish(self, *args, **kwargs)

        monkeypatch.setattr(Store, "finish_exchange", slow)
    with ServerThread(counting_upstream(received)) as up:
        upstreams = [{"name": "up", "base_url": up.url + "/v1", "context_window": WINDOW}]
        proxy = start_proxy(make_settings(tmp, up.url, upstreams=upstreams))
        for end in request_points(history)[1:]:
            with httpx.stream(
                "POST",
                proxy.url + "/v1/chat/completions",
                headers={"X-Session-Id": "replayed"},
                json={"model": "m", "messages": history[:end], "stream": True},
                timeout=60,
            ) as r:
                assert r.status_code == 200
                for line in r.iter_lines():
                    if line == "data: [DONE]":
                        break  # and at once the next request, as a scripted agent does
    monkeypatch.undo()
    return [json.dumps(m, sort_keys=True) for m in received]


def test_a_session_replayed_with_answers_recorded_late_gives_the_same_views(
    tmp_path: Path, start_proxy: Any, monkeypatch: Any
) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    prompt = replay(tmp_path / "a", start_proxy, False, monkeypatch)
    late = replay(tmp_path / "b", start_proxy, True, monkeypatch)
    assert len(prompt) == len(late) == 24
    assert any(len(v) < len(prompt[-1]) for v in prompt)  # it compacted on the way
    assert prompt == late
