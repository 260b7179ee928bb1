"""Through ctxproxy to a real llama.cpp server (xllamacpp + SmolLM2), compared with direct."""

from __future__ import annotations

import math

import httpx
import openai
import pytest

from tests.llamacpp import LlamaServer
from tests.servers import ServerThread
from tests.strategies.helpers import agent_history, log_lines

pytestmark = pytest.mark.llama

ASK = [
    {"role": "system", "content": "You answer in one short sentence."},
    {"role": "user", "content": "What is the capital of France?"},
]


@pytest.fixture
def via_proxy(llama: LlamaServer, start_proxy, settings_for) -> ServerThread:
    return start_proxy(
        settings_for(
            upstreams=[{"name": "llama", "kind": "llamacpp", "base_url": llama.base_url + "/v1"}]
        )
    )


def test_plain_chat_same_as_direct(llama: LlamaServer, via_proxy: ServerThread) -> None:
    kw = dict(model="smollm2", messages=ASK, temperature=0, max_tokens=24)
    direct = openai.OpenAI(base_url=llama.base_url + "/v1", api_key="x")
    proxied = openai.OpenAI(base_url=via_proxy.url + "/v1", api_key="x")
    want = direct.chat.completions.create(**kw)
    got = proxied.chat.completions.with_raw_response.create(**kw)
    answer = got.parse()
    assert answer.choices[0].message.content == want.choices[0].message.content
    assert answer.usage.prompt_tokens == want.usage.prompt_tokens
    # The window came from the server's /props: 8192 over 2 slots = 4096 per slot; the budget
    # is the whole prompt's (tool definitions included, as in the compiled figure).
    budget = 4096 - 24 - math.ceil(0.05 * 4096)
    assert int(got.headers["x-ctxproxy-budget"]) == budget
    assert got.headers["x-ctxproxy-compaction"] == "none"


def test_streaming_same_text_as_direct(llama: LlamaServer, via_proxy: ServerThread) -> None:
    kw = dict(model="smollm2", messages=ASK, temperature=0, max_tokens=24)
    direct = openai.OpenAI(base_url=llama.base_url + "/v1", api_key="x")
    want = direct.chat.completions.create(**kw).choices[0].message.content
    proxied = openai.OpenAI(base_url=via_proxy.url + "/v1", api_key="x")
    chunks = list(
        proxied.chat.completions.create(**kw, stream=True, stream_options={"include_usage": True})
    )
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert len([c for c in chunks if c.choices]) > 3  # really streamed, not one blob
    assert text == want
    assert chunks[-1].usage is not None and chunks[-1].usage.prompt_tokens > 0


def test_overflow_from_llama_is_context_length_exceeded(via_proxy: ServerThread) -> None:
    # A system prompt far past the window: never compacted, so the client gets one 400.
    huge = [{"role": "system", "content": "word " * 6000}, {"role": "user", "content": "hi"}]
    r = httpx.post(
        via_proxy.url + "/v1/chat/completions",
        timeout=60,
        json={"model": "smollm2", "messages": huge, "max_tokens": 8},
    )
    assert r.status_code == 400
    assert r.json()["error"]["code"] == "context_length_exceeded"


@pytest.mark.parametrize("stream", [False, True])
def test_a_folded_view_offers_recall_and_llama_takes_the_request(
    via_proxy: ServerThread, stream: bool
) -> None:
    """A long agent history folds into the 4k slot: the forwarded request carries
    ctxproxy_recall after the client's tool, llama.cpp accepts it, the client never sees it."""
    history = [
        *agent_history([log_lines(120) for _ in range(12)]),
        {"role": "user", "content": "What did the first command print?"},
    ]
    tool = {"type": "function", "function": {"name": "run_command", "parameters": {}}}
    client = openai.OpenAI(base_url=via_proxy.url + "/v1", api_key="x")
    kw = dict(model="smollm2", messages=history, tools=[tool], temperature=0, max_tokens=32)
    sid = {"X-Session-Id": f"recall-{stream}"}
    if stream:
        chunks = list(client.chat.completions.create(**kw, stream=True, extra_headers=sid))
        calls = [tc for c in chunks if c.choices for tc in c.choices[0].delta.tool_calls or []]
        names = [tc.function.name for tc in calls if tc.function and tc.function.name]
    else:
        answer = client.chat.completions.create(**kw, extra_headers=sid)
        names = [tc.function.name for tc in answer.choices[0].message.tool_calls or []]
    assert "ctxproxy_recall" not in names
    x = httpx.get(f"{via_proxy.url}/sessions/recall-{stream}/exchanges/1").json()
    assert x["exchange"]["status"] == 200
    sent = x["compiled_request"]
    assert [t["function"]["name"] for t in sent["tools"]] == ["run_command", "ctxproxy_recall"]
    assert len(sent["messages"]) < len(history)  # folded: old steps left out
    assert isinstance(x["recalls"], list)
