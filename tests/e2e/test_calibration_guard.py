"""Calibration that cannot be fooled: an upstream reporting bogus usage changes nothing, and a
growing history's reported size never goes down."""

from __future__ import annotations

import httpx
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from proxy.compile.calibrate import Calibration, next_factor
from proxy.compile.tokens import TokenCounter
from proxy.testing.servers import ServerThread
from strategies.pipeline import request_points
from tests.unit.strategies.helpers import agent_history, fixture, log_lines

WINDOW = 4096


def test_implausible_usage_is_ignored_and_plausible_usage_moves_the_factor() -> None:
    cal = Calibration(size=2)
    cal.observe("up", "m", 1000, 1)  # a server that reports nothing real
    cal.observe("up", "m", 1000, 90_000)
    assert cal.factor("up", "m") == 1.0
    cal.observe("up", "m", 1000, 1200)
    assert cal.factor("up", "m") == 1.2
    for model in ("a", "b", "c"):  # bounded: client-chosen model names cannot grow it
        cal.observe("up", model, 1000, 1100)
    assert cal.factor("up", "m") == 1.0 and len(cal._factors) == 2
    assert next_factor(1.1, 1000, 2) == 1.1
    assert next_factor(1.0, 1000, 1200) == 1.1


def bogus_upstream(received: list[dict]) -> Starlette:
    async def chat(request: Request) -> JSONResponse:
        body = await request.json()
        received.append(body)
        message = {"role": "assistant", "content": "ok"}
        return JSONResponse(
            {
                "id": "x",
                "object": "chat.completion",
                "model": body["model"],
                "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
                "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
            }
        )

    return Starlette(routes=[Route("/v1/chat/completions", chat, methods=["POST"])])


def test_bogus_usage_never_lets_a_prompt_past_the_window(start_proxy, settings_for) -> None:
    received: list[dict] = []
    outputs = [fixture("seed_demo.txt"), log_lines(120), "ok", fixture("pytest_failures.txt")]
    history = agent_history([outputs[i % 4] for i in range(30)])
    counter = TokenCounter()
    with ServerThread(bogus_upstream(received)) as up:
        upstreams = [{"name": "bogus", "base_url": up.url + "/v1", "context_window": WINDOW}]
        proxy = start_proxy(settings_for(upstreams=upstreams))
        originals = []
        for end in request_points(history)[1:]:
            r = httpx.post(
                proxy.url + "/v1/chat/completions",
                headers={"X-Session-Id": "bogus"},
                json={"model": "m", "messages": history[:end]},
                timeout=60,
            )
            assert r.status_code == 200, r.text
            originals.append(int(r.headers["x-ctxproxy-tokens-original"]))
    assert len(received) == len(originals) == 30
    assert max(counter.count_messages(b["messages"]) for b in received) <= WINDOW
    assert originals == sorted(originals)  # a growing history never looks smaller
