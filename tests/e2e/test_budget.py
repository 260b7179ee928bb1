"""The answer's reservation, the figures and Server-Timing, as a client of each API sees them."""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from proxy.settings import Settings
from proxy.testing.scripted import Script
from proxy.testing.servers import ServerThread
from tests.unit.test_compiler import qwen_shaped

ASKED = 32_000
HI = [{"role": "user", "content": "hi"}]
# The same request in each API, asking 32,000 answer tokens.
REQUESTS = {
    "chat": ("/v1/chat/completions", {"model": "echo", "max_tokens": ASKED, "messages": HI}),
    "messages": ("/v1/messages", {"model": "echo", "max_tokens": ASKED, "messages": HI}),
    "responses": ("/v1/responses", {"model": "echo", "max_output_tokens": ASKED, "input": "hi"}),
}


def windowed(settings_for: Callable[..., Settings], url: str, window: int, **up: Any) -> Settings:
    upstream = {"name": "scripted", "base_url": url, "context_window": window, **up}
    return settings_for(upstreams=[upstream])


def timings(header: str) -> dict[str, float]:
    return {m[1]: float(m[2]) for m in re.finditer(r"(\w+);dur=([\d.]+)", header)}


@pytest.mark.parametrize("kind", ["openai", "llamacpp"])  # translated, or native where served
@pytest.mark.parametrize("api", list(REQUESTS))
def test_the_answer_reservation_is_the_same_on_every_api(
    start_proxy, settings_for, upstream_url, script: Script, api: str, kind: str
) -> None:
    proxy = start_proxy(windowed(settings_for, upstream_url, 16_384, kind=kind))
    path, body = REQUESTS[api]
    r = httpx.post(proxy.url + path, json=body, timeout=30)
    assert r.status_code == 200, r.text
    # An eighth of the window is reserved: the prompt's budget, tools included.
    assert int(r.headers["x-ctxproxy-budget"]) == 16_384 - 2_048 - 820
    # What goes upstream asks what the compiled prompt leaves, and the client is told.
    left = 16_384 - 820 - int(r.headers["x-ctxproxy-tokens-compiled"])
    sent = script.received[-1]
    key = "max_output_tokens" if "input" in sent else "max_tokens"  # Responses natively
    assert sent[key] == left
    assert r.headers["x-ctxproxy-max-tokens"] == f"{ASKED}->{left}"


def test_a_limit_that_fits_is_forwarded_unchanged(proxy: ServerThread, script: Script) -> None:
    body = {"model": "echo", "max_tokens": 300, "messages": HI}
    r = httpx.post(proxy.url + "/v1/chat/completions", json=body)
    assert r.status_code == 200 and script.received[-1]["max_tokens"] == 300
    assert "x-ctxproxy-max-tokens" not in r.headers


def test_qwen_code_first_request_at_32k_is_answered(
    start_proxy, settings_for, upstream_url, script: Script
) -> None:
    proxy = start_proxy(windowed(settings_for, upstream_url, 32_768))
    r = httpx.post(proxy.url + "/v1/chat/completions", json=qwen_shaped(), timeout=30)
    assert r.status_code == 200, r.text
    compiled, budget = (int(r.headers[f"x-ctxproxy-{h}"]) for h in ("tokens-compiled", "budget"))
    assert 8_000 < compiled <= budget  # tools included on both sides
    forwarded = script.received[-1]["max_tokens"]
    assert compiled + forwarded <= 32_768  # vLLM would accept it
    assert r.headers["x-ctxproxy-max-tokens"] == f"{ASKED}->{forwarded}"


def test_qwen_code_at_16k_is_refused_once_naming_the_fixed_part_with_its_figures(
    start_proxy, settings_for, upstream_url, script: Script, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="ctxproxy.access")
    proxy = start_proxy(windowed(settings_for, upstream_url, 16_384))
    r = httpx.post(proxy.url + "/v1/chat/completions", json=qwen_shaped(13_000), timeout=30)
    assert r.status_code == 400 and not script.received
    message = r.json()["error"]["message"]
    assert "fixed part alone does not fit" in message and "tool definitions" in message
    assert not re.search(r"-\d", message)  # no negative figure anywhere
    assert "messages[" not in message  # no single message blamed
    compiled, budget = (int(r.headers[f"x-ctxproxy-{h}"]) for h in ("tokens-compiled", "budget"))
    assert compiled > 15_000 and budget == 16_384 - 2_048 - 820
    assert "total;dur=" in r.headers["server-timing"]
    (line,) = [json.loads(x.getMessage()) for x in caplog.records if x.name == "ctxproxy.access"]
    assert (line["tokens_compiled"], line["budget"], line["window"]) == (compiled, budget, 16_384)
    assert line["tokens_original"] >= compiled and line["status"] == 400
    exchanges = httpx.get(proxy.url + f"/sessions/{line['session']}/exchanges").json()["data"]
    assert (exchanges[0]["tokens_compiled"], exchanges[0]["budget"]) == (compiled, budget)


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("api", list(REQUESTS))
def test_every_answer_says_what_ctxproxy_cost(
    proxy: ServerThread, script: Script, api: str, stream: bool
) -> None:
    path, body = REQUESTS[api]
    with httpx.stream("POST", proxy.url + path, json={**body, "stream": stream}) as r:
        assert r.status_code == 200
        spans = timings(r.headers["server-timing"])  # in the head, before the first byte
        r.read()
    assert {"store", "compile", "upstream", "proxy", "total"} <= set(spans)
    assert ("answer" in spans) is not stream  # a stream's head goes before its body is read
    waited = spans["upstream"] + spans.get("answer", 0)
    assert spans["proxy"] == pytest.approx(spans["total"] - waited, abs=0.2)
    assert spans["store"] + spans["compile"] <= spans["proxy"] + 0.2
