"""Claude Code's first request (a system message mid-conversation) and Codex's (developer items,
a namespace, web_search) through ctxproxy to the real llama.cpp, natively and translated."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from tests.llamacpp import LlamaServer

pytestmark = pytest.mark.llama
FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"


def _sent(name: str) -> dict:
    return json.loads((FIXTURES / name).read_text())["body"]


@pytest.mark.parametrize("apis", [None, ["chat"]])
def test_agents_first_requests_answered(
    llama: LlamaServer, start_proxy, settings_for, apis: list[str] | None
) -> None:
    upstream = {"name": "llama", "kind": "llamacpp", "base_url": llama.base_url + "/v1"}
    proxy = start_proxy(settings_for(upstreams=[{**upstream, "apis": apis}]))
    claude = {**_sent("claude_code_2.1.197_first_request.json"), "model": "smollm2"}
    claude.update(max_tokens=8, stream=False)
    r = httpx.post(proxy.url + "/v1/messages?beta=true", json=claude, timeout=120)
    assert r.status_code == 200, r.text
    assert r.json()["content"][0]["type"] == "text"
    codex = {**_sent("codex_0.171.0_first_request.json"), "model": "smollm2"}
    codex.update(max_output_tokens=8, stream=False)
    r = httpx.post(proxy.url + "/v1/responses", json=codex, timeout=120)
    assert r.status_code == 200, r.text
    assert r.json()["output"][-1]["type"] == "message"
