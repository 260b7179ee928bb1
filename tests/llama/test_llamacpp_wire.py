"""Messages and Responses through ctxproxy to the real llama.cpp server, which serves both
APIs itself: forwarded natively, compacted, audited."""

from __future__ import annotations

import anthropic
import httpx
import openai
import pytest

from proxy.testing.llamacpp import LlamaServer
from proxy.testing.servers import ServerThread

pytestmark = pytest.mark.llama
ASK = [{"role": "user", "content": "What is the capital of France?"}]


@pytest.fixture
def via_proxy(llama: LlamaServer, start_proxy, settings_for) -> ServerThread:
    return start_proxy(
        settings_for(
            upstreams=[{"name": "llama", "kind": "llamacpp", "base_url": llama.base_url + "/v1"}]
        )
    )


def test_messages_create_same_as_direct(llama: LlamaServer, via_proxy: ServerThread) -> None:
    kw = dict(
        model="smollm2",
        max_tokens=24,
        extra_body={"temperature": 0},
        system="Answer briefly.",
        messages=ASK,
    )
    direct = anthropic.Anthropic(base_url=llama.base_url, api_key="x").messages.create(**kw)
    c = anthropic.Anthropic(base_url=via_proxy.url, api_key="x", max_retries=0)
    got = c.messages.with_raw_response.create(**kw)
    answer = got.parse()
    assert answer.content[0].text == direct.content[0].text
    # The same prompt: the server's prefix cache serves the second one.
    u, d = answer.usage, direct.usage
    assert u.input_tokens + u.cache_read_input_tokens == d.input_tokens + d.cache_read_input_tokens
    assert got.headers["x-ctxproxy-compaction"] == "none"
    sid = got.headers["x-ctxproxy-session"]
    detail = httpx.get(f"{via_proxy.url}/sessions/{sid}/exchanges/1").json()
    assert detail["response"]["content"] == direct.content[0].text
    assert detail["request"]["ctxproxy_api"] == "messages"
    assert detail["usage"]["prompt_tokens"] > 0


def test_messages_stream_native(llama: LlamaServer, via_proxy: ServerThread) -> None:
    kw = dict(model="smollm2", max_tokens=24, extra_body={"temperature": 0}, messages=ASK)
    want = anthropic.Anthropic(base_url=llama.base_url, api_key="x").messages.create(**kw)
    c = anthropic.Anthropic(base_url=via_proxy.url, api_key="x", max_retries=0)
    with c.messages.stream(**kw) as stream:
        pieces = list(stream.text_stream)
        final = stream.get_final_message()
    assert len(pieces) > 3
    assert "".join(pieces) == want.content[0].text == final.content[0].text


def test_messages_long_tool_history_compacted(llama: LlamaServer, via_proxy: ServerThread) -> None:
    from tests.e2e.test_anthropic_messages import tool_history

    c = anthropic.Anthropic(
        base_url=via_proxy.url, api_key="x", max_retries=0, default_headers={"x-session-id": "l40"}
    )
    got = c.messages.with_raw_response.create(
        model="smollm2",
        max_tokens=16,
        extra_body={"temperature": 0},
        messages=tool_history(40),
        timeout=300,
    )
    answer = got.parse()
    assert answer.type == "message" and answer.content
    assert got.headers["x-ctxproxy-compaction"] != "none"
    detail = httpx.get(f"{via_proxy.url}/sessions/l40/exchanges/1").json()
    assert detail["events"] and detail["exchange"]["status"] == 200


def test_messages_overflow_is_prompt_too_long(via_proxy: ServerThread) -> None:
    c = anthropic.Anthropic(base_url=via_proxy.url, api_key="x", max_retries=0)
    with pytest.raises(anthropic.BadRequestError) as exc:
        c.messages.create(model="smollm2", max_tokens=8, system="word " * 6000, messages=ASK)
    assert exc.value.body["error"]["message"].startswith("prompt is too long")


def test_responses_create_and_stream_native(llama: LlamaServer, via_proxy: ServerThread) -> None:
    kw = dict(model="smollm2", input=ASK, max_output_tokens=24, temperature=0)
    want = openai.OpenAI(base_url=llama.base_url + "/v1", api_key="x").responses.create(**kw)
    c = openai.OpenAI(base_url=via_proxy.url + "/v1", api_key="x", max_retries=0)
    got = c.responses.with_raw_response.create(**kw)
    assert got.parse().output_text == want.output_text
    sid = got.headers["x-ctxproxy-session"]
    detail = httpx.get(f"{via_proxy.url}/sessions/{sid}/exchanges/1").json()
    assert detail["request"]["ctxproxy_api"] == "responses"
    assert detail["response"]["content"] == want.output_text
    events = list(c.responses.create(**kw, stream=True))
    deltas = [e.delta for e in events if e.type == "response.output_text.delta"]
    assert len(deltas) > 3 and "".join(deltas) == want.output_text
    assert events[-1].type == "response.completed"
    detail = httpx.get(f"{via_proxy.url}/sessions/{sid}/exchanges/2").json()
    assert detail["response"]["content"] == want.output_text
    assert detail["usage"]["prompt_tokens"] > 0


def test_responses_function_call_history_native(via_proxy: ServerThread) -> None:
    items: list = [{"role": "user", "content": "List the files."}]
    items += [
        {"type": "function_call", "call_id": "c1", "name": "shell", "arguments": '{"cmd":"ls"}'},
        {"type": "function_call_output", "call_id": "c1", "output": "README.md\nsetup.py"},
        {"role": "user", "content": "Which one is the readme?"},
    ]
    c = openai.OpenAI(base_url=via_proxy.url + "/v1", api_key="x", max_retries=0)
    tool = {"type": "function", "name": "shell", "parameters": {"type": "object"}}
    answer = c.responses.create(
        model="smollm2", input=items, tools=[tool], max_output_tokens=16, temperature=0
    )
    assert answer.status in ("completed", "incomplete") and answer.output
