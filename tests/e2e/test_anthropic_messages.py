"""Anthropic's Messages API through ctxproxy, driven by the official `anthropic` SDK, against
the scripted upstream that serves chat completions only: every request is translated."""

from __future__ import annotations

import json
from pathlib import Path

import anthropic
import httpx
import pytest

from proxy.testing.scripted import Script
from proxy.testing.servers import ServerThread
from tests.e2e.test_sessions_audit import noisy_log

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
WEATHER = {
    "name": "get_weather",
    "description": "The weather in a city",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}},
}


def client(proxy: ServerThread, **kw) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=proxy.url, api_key="client-key", max_retries=0, **kw)


def test_create_plain_text(proxy: ServerThread, script: Script) -> None:
    r = client(proxy).messages.with_raw_response.create(
        model="echo",
        max_tokens=64,
        system=[{"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}}],
        messages=[{"role": "user", "content": "hello there"}],
        stop_sequences=["END"],
        metadata={"user_id": "user_abc_session_42"},
    )
    message = r.parse()
    assert message.type == "message" and message.role == "assistant"
    assert message.content[0].type == "text"
    assert message.content[0].text == "echo: hello there"
    assert message.stop_reason == "end_turn"
    assert message.usage.input_tokens > 0
    assert r.headers["x-ctxproxy-session"] == "user_abc_session_42"
    sent = script.received[-1]
    assert sent["messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "hello there"},
    ]
    assert sent["stop"] == ["END"] and sent["max_tokens"] == 64
    assert "ctxproxy_api" not in sent


def test_stream_text(proxy: ServerThread) -> None:
    with client(proxy).messages.stream(
        model="echo", max_tokens=64, messages=[{"role": "user", "content": "one two three"}]
    ) as stream:
        pieces = list(stream.text_stream)
        final = stream.get_final_message()
    assert len(pieces) > 2  # really streamed, word by word
    assert "".join(pieces).strip() == "echo: one two three"
    assert final.content[0].text.strip() == "echo: one two three"
    assert final.stop_reason == "end_turn"


@pytest.mark.parametrize("stream", [False, True])
def test_tool_use_round_trip(proxy: ServerThread, script: Script, stream: bool) -> None:
    c = client(proxy)
    messages: list[dict] = [{"role": "user", "content": "Weather in Paris and Oslo?"}]
    kw = dict(model="tools", max_tokens=64, tools=[WEATHER], messages=messages)
    if stream:
        with c.messages.stream(**kw) as s:
            answer = s.get_final_message()
    else:
        answer = c.messages.create(**kw)
    assert answer.stop_reason == "tool_use"
    uses = [b for b in answer.content if b.type == "tool_use"]
    assert [(u.name, u.input) for u in uses] == [
        ("get_weather", {"city": "Paris"}),
        ("get_weather", {"city": "Oslo"}),
    ]
    assert script.received[-1]["tools"][0]["function"]["name"] == "get_weather"
    results = [
        {"type": "tool_result", "tool_use_id": u.id, "content": f"sunny in {u.input['city']}"}
        for u in uses
    ]
    messages += [
        {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in answer.content]},
        {"role": "user", "content": [*results, {"type": "text", "text": "thanks"}]},
    ]
    final = c.messages.create(model="echo", max_tokens=64, tools=[WEATHER], messages=messages)
    assert final.content[0].text == "echo: thanks"
    sent = script.received[-1]["messages"]
    assert [m["role"] for m in sent] == ["user", "assistant", "tool", "tool", "user"]
    assert [c["id"] for c in sent[1]["tool_calls"]] == [u.id for u in uses]
    assert sent[2] == {"role": "tool", "tool_call_id": uses[0].id, "content": "sunny in Paris"}


def tool_history(steps: int) -> list[dict]:
    messages: list[dict] = [{"role": "user", "content": "Make the test suite pass."}]
    for step in range(steps):
        call = f"toolu_{step:03d}"
        messages.append(
            {
                "role": "assistant",
                "content": [
                    {"type": "thinking", "thinking": f"step {step}", "signature": f"sig{step}"},
                    {"type": "text", "text": f"Running the tests, step {step}."},
                    {"type": "tool_use", "id": call, "name": "bash", "input": {"cmd": "pytest"}},
                ],
            }
        )
        result = {"type": "tool_result", "tool_use_id": call, "content": noisy_log(step % 60)}
        messages.append({"role": "user", "content": [result]})
    messages[-1]["content"].append({"type": "text", "text": "what now?"})
    return messages


def test_forty_step_history_into_4k_window(start_proxy, settings_for, upstream_url) -> None:
    proxy = start_proxy(
        settings_for(
            upstreams=[{"name": "scripted", "base_url": upstream_url, "context_window": 4096}]
        )
    )
    r = client(proxy, default_headers={"x-session-id": "claude-40"}).messages.with_raw_response
    answer = r.create(model="echo", max_tokens=256, messages=tool_history(40))
    assert answer.parse().content[0].text == "echo: what now?"
    original = int(answer.headers["x-ctxproxy-tokens-original"])
    compiled = int(answer.headers["x-ctxproxy-tokens-compiled"])
    assert original > 4096 * 5 and compiled <= int(answer.headers["x-ctxproxy-budget"])
    assert answer.headers["x-ctxproxy-compaction"] != "none"
    detail = httpx.get(f"{proxy.url}/sessions/claude-40/exchanges/1").json()
    assert detail["events"] and detail["request"]["ctxproxy_api"] == "messages"
    assert detail["response"]["content"] == "echo: what now?"
    # The stored history is the neutral form: 40 tool calls, each with its result.
    stored = detail["request"]["messages"]
    assert sum(m["role"] == "tool" for m in stored) == 40


def test_an_agent_sized_session_continues_as_it_began(proxy: ServerThread, script: Script) -> None:
    """Claude Code's ~150 KB of system prompt and tools, resent each turn: a next turn (only its
    new step unseen, so its work runs on the event loop) goes upstream and into the store as
    the first turn did, and so does one whose system prompt changed."""
    text = "You are a careful coding agent. " * 3000
    tools = [{**WEATHER, "name": f"tool_{i}", "description": "x" * 2000} for i in range(20)]
    fixed = {"model": "echo", "max_tokens": 64, "tools": tools}
    turns = [
        (text, {**fixed, "system": [{"type": "text", "text": text}], "messages": tool_history(3)}),
        (text, {**fixed, "system": [{"type": "text", "text": text}], "messages": tool_history(4)}),
        ("You are terse.", {**fixed, "system": "You are terse.", "messages": tool_history(4)}),
    ]
    for n, (system, body) in enumerate(turns, 1):
        r = httpx.post(
            proxy.url + "/v1/messages", json=body, headers={"x-session-id": "big"}, timeout=30
        )
        assert r.status_code == 200, r.text
        assert r.json()["content"][0]["text"] == "echo: what now?"
        sent = script.received[-1]
        assert sent["messages"][0] == {"role": "system", "content": system}
        assert [t["function"]["name"] for t in sent["tools"]] == [t["name"] for t in tools]
        assert sum(m["role"] == "tool" for m in sent["messages"]) == len(body["messages"]) // 2
        detail = httpx.get(f"{proxy.url}/sessions/big/exchanges/{n}", timeout=10).json()
        assert detail["exchange"]["status"] == 200
        assert detail["response"]["content"] == "echo: what now?"
        assert detail["request"]["messages"] == sent["messages"]


def test_errors_in_anthropic_envelope(start_proxy, settings_for) -> None:
    proxy = start_proxy(settings_for(api_keys=["sekrit"]))
    with pytest.raises(anthropic.AuthenticationError) as denied:
        client(proxy).messages.create(
            model="echo", max_tokens=8, messages=[{"role": "user", "content": "hi"}]
        )
    assert denied.value.body["error"]["type"] == "authentication_error"
    ok = anthropic.Anthropic(base_url=proxy.url, api_key="sekrit", max_retries=0)
    assert (
        ok.messages.create(model="echo", max_tokens=8, messages=[{"role": "user", "content": "hi"}])
        .content[0]
        .text
        == "echo: hi"
    )
    with pytest.raises(anthropic.BadRequestError) as bad:
        ok.messages.create(
            model="fail-400", max_tokens=8, messages=[{"role": "user", "content": "x"}]
        )
    assert bad.value.body == {
        "type": "error",
        "error": {"type": "invalid_request_error", "message": "scripted failure 400"},
    }
    with pytest.raises(anthropic.RateLimitError):
        ok.messages.create(
            model="fail-429", max_tokens=8, messages=[{"role": "user", "content": "x"}]
        )


def test_too_long_is_prompt_too_long(start_proxy, settings_for, upstream_url) -> None:
    proxy = start_proxy(
        settings_for(
            upstreams=[{"name": "scripted", "base_url": upstream_url, "context_window": 2048}]
        )
    )
    r = httpx.post(
        proxy.url + "/v1/messages",
        json={
            "model": "echo",
            "max_tokens": 64,
            "system": "word " * 5000,
            "messages": [{"role": "user", "content": "hi"}],
        },
    )
    assert r.status_code == 400
    err = r.json()
    assert err["type"] == "error" and err["error"]["type"] == "invalid_request_error"
    assert err["error"]["message"].startswith("prompt is too long: ")


def test_count_tokens(proxy: ServerThread) -> None:
    c = client(proxy)
    small = c.messages.count_tokens(model="echo", messages=[{"role": "user", "content": "hi"}])
    big = c.messages.count_tokens(
        model="echo", tools=[WEATHER], messages=[{"role": "user", "content": "hi " * 500}]
    )
    assert 0 < small.input_tokens < big.input_tokens


def test_unknown_block_fields_survive_in_store(proxy: ServerThread, script: Script) -> None:
    body = {
        "model": "echo",
        "max_tokens": 16,
        "messages": [
            {
                "role": "user",
                "content": [{"type": "text", "text": "hi", "cache_control": {"type": "ephemeral"}}],
            }
        ],
    }
    r = httpx.post(
        proxy.url + "/v1/messages", json=body, headers={"anthropic-version": "2023-06-01"}
    )
    assert r.status_code == 200, r.text
    assert json.loads(r.text)["content"][0]["text"] == "echo: hi"


def test_native_forwarding_keeps_untouched_messages_byte_exact(
    start_proxy, settings_for, upstream_url, script: Script
) -> None:
    """An upstream that serves /v1/messages gets the client's own blocks back, signatures and
    cache_control included, for every message compaction left alone; the others are rebuilt."""
    proxy = start_proxy(
        settings_for(
            upstreams=[
                {
                    "name": "native",
                    "base_url": upstream_url,
                    "context_window": 4096,
                    "apis": ["chat", "messages"],
                }
            ],
            recall={"translate": False},  # native even once folded: no recall tool
        )
    )
    history = tool_history(40)
    latest = history[-2]  # the latest step: an assistant message that stays as it came
    latest["x_unknown"] = {"kept": True}
    latest["content"][-1]["cache_control"] = {"type": "ephemeral"}
    r = httpx.post(
        proxy.url + "/v1/messages",
        json={"model": "any", "max_tokens": 256, "system": "You fix bugs.", "messages": history},
        headers={"anthropic-version": "2023-06-01", "anthropic-beta": "tools-2024"},
        timeout=60,
    )
    assert r.status_code == 200, r.text
    assert r.json()["content"][0]["text"] == "native: what now?"
    assert r.headers["x-ctxproxy-compaction"] != "none"
    sent = script.received[-1]
    assert script.headers[-1]["anthropic-version"] == "2023-06-01"
    assert script.headers[-1]["anthropic-beta"] == "tools-2024"
    assert sent["system"] == "You fix bugs."
    # The task hosts the forget marker, in the user's voice: rebuilt, the user's text first.
    assert sent["messages"][0]["content"].startswith(history[0]["content"] + "\n\n[ctxproxy: ")
    assert "earlier messages" in json.dumps(sent["messages"][0])
    assert sent["messages"][-3] == history[-2]  # thinking, unknown fields, cache_control
    # Its log, the newest output, was cut to fit (never forgotten whole): the message is
    # rebuilt, the result and the text apart, and the cut names its original.
    assert sent["messages"][-2]["content"][0]["tool_use_id"] == "toolu_039"
    cut = sent["messages"][-2]["content"][0]["content"]
    assert "cut to fit" in cut and "ctxproxy_recall original: /messages/" in cut
    assert sent["messages"][-1] == {"role": "user", "content": "what now?"}
    kept = [m for m in sent["messages"] if m in history]
    assert len(kept) < len(sent["messages"]) <= len(history)  # some were compacted
    assert any(b.get("signature") for m in kept[1:] for b in m["content"])
    # The raw request bytes hold each untouched message as the client wrote it.
    raw = script.raw[-1].decode()
    assert '"signature": "sig39"' in raw or '"signature":"sig39"' in raw


def test_huge_max_tokens_reserves_a_share_of_the_window(
    start_proxy, settings_for, upstream_url, script: Script
) -> None:
    """Claude Code asks 32,000 output tokens of any model: the answer's reserve is capped, or
    no prompt would fit a small window."""
    proxy = start_proxy(
        settings_for(
            upstreams=[{"name": "scripted", "base_url": upstream_url, "context_window": 16384}]
        )
    )
    body = {"model": "echo", "max_tokens": 32000, "messages": [{"role": "user", "content": "hi"}]}
    r = httpx.post(proxy.url + "/v1/messages", json=body)
    assert r.json()["content"][0]["text"] == "echo: hi"
    # An eighth of the window is reserved; what is asked is what the prompt leaves.
    assert int(r.headers["x-ctxproxy-budget"]) == 16384 - 2048 - 820
    left = 16384 - 820 - int(r.headers["x-ctxproxy-tokens-compiled"])
    assert script.received[-1]["max_tokens"] == left
    assert r.headers["x-ctxproxy-max-tokens"] == f"32000->{left}"


@pytest.mark.parametrize("model", ["reset", "garbled"])
def test_stream_cut_short_ends_in_an_error_event(proxy: ServerThread, model: str) -> None:
    body = {
        "model": model,
        "max_tokens": 16,
        "stream": True,
        "messages": [{"role": "user", "content": "hi"}],
    }
    headers = {"x-session-id": f"cut-{model}"}
    with httpx.stream(
        "POST", proxy.url + "/v1/messages", json=body, headers=headers, timeout=30
    ) as r:
        text = r.read().decode()
    events = [line[7:] for line in text.split("\n") if line.startswith("event: ")]
    assert events[0] == "message_start" and events[-1] == "error"
    assert "message_stop" not in events
    last = json.loads(text.strip().split("\n")[-1][6:])
    assert last["type"] == "error" and last["error"]["type"] == "api_error"
    detail = httpx.get(f"{proxy.url}/sessions/cut-{model}/exchanges/1").json()
    assert detail["exchange"]["partial"] or detail["error"]


def test_beta_messages_as_claude_code_sends_them(proxy: ServerThread, script: Script) -> None:
    """Claude Code posts to /v1/messages?beta=true with anthropic-beta flags."""
    c = client(proxy)
    answer = c.beta.messages.create(
        model="echo",
        max_tokens=16,
        betas=["interleaved-thinking-2025-05-14"],
        messages=[{"role": "user", "content": "quota"}],
    )
    assert answer.content[0].text == "echo: quota"


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("apis", [None, ["chat", "messages"]])
def test_recall_works_through_a_translated_messages_exchange(
    start_proxy, settings_for, upstream_url, script: Script, stream: bool, apis: list | None
) -> None:
    """Claude Code's history folded into 4k: the model's ctxproxy_recall call is answered by
    ctxproxy, and the Anthropic client gets the answer with no tool_use it did not define.
    An upstream that serves /v1/messages itself gets the folded view translated, with the
    tool (recall.translate)."""
    upstream = {"name": "scripted", "base_url": upstream_url, "context_window": 4096}
    proxy = start_proxy(settings_for(upstreams=[upstream | {"apis": apis}]))
    messages = tool_history(30)
    first = messages[2]["content"][0]
    first["content"] = "SECRET_TOKEN=tok-7781\n" + first["content"]
    messages[-1]["content"][-1]["text"] = 'RECALL {"query": "SECRET_TOKEN"}'
    api = client(proxy, default_headers={"x-session-id": f"recall-{stream}"}).messages
    kw = dict(model="recaller", max_tokens=256, messages=messages)
    if stream:
        with api.stream(**kw) as s:
            answer = s.get_final_message()
    else:
        answer = api.create(**kw)
    assert [b.type for b in answer.content] == ["text"]
    assert "tok-7781" in answer.content[0].text and answer.stop_reason == "end_turn"
    assert "tok-7781" not in json.dumps(script.received[0]["messages"])  # folded away
    assert script.received[0]["tools"][-1]["function"]["name"] == "ctxproxy_recall"
    x = httpx.get(f"{proxy.url}/sessions/recall-{stream}/exchanges/1").json()
    assert [c["outcome"] for c in x["recalls"]] == ["ok"]


def claude_code_request(model: str, stream: bool = False) -> dict:
    """Claude Code 2.1.197's first request as it sent it (tests/fixtures), for this model."""
    sent = json.loads((FIXTURES / "claude_code_2.1.197_first_request.json").read_text())
    return {**sent["body"], "model": model, "stream": stream}


def native_proxy(start_proxy, settings_for, upstream_url) -> ServerThread:
    upstream = {"name": "native", "base_url": upstream_url, "apis": ["chat", "messages"]}
    return start_proxy(settings_for(upstreams=[upstream], recall={"translate": False}))


@pytest.mark.parametrize("stream", [False, True])
def test_claude_code_mid_conversation_system_message_translated(
    proxy: ServerThread, script: Script, stream: bool
) -> None:
    """Its mid-conversation `role: "system"` message was refused with a 400 and the CLI died on
    its first request; translated to chat, it rides in the user turn as a marked reminder."""
    body = claude_code_request("claude-opus-4-8", stream)
    r = httpx.post(proxy.url + "/v1/messages?beta=true", json=body, timeout=30)
    assert r.status_code == 200, r.text
    assert "echo:" in r.text
    sent = script.received[-1]["messages"]
    assert [m["role"] for m in sent] == ["system", "user"]
    # It came after the task, the last turn: it goes at the end of that turn.
    task, reminder = sent[1]["content"].split("Fix the bug in calc.py so add works\n\n")
    assert reminder.startswith("<system-reminder>\nAvailable agent types for the Agent tool")
    assert reminder.endswith("</system-reminder>")
    session = httpx.get(proxy.url + "/sessions").json()["data"][0]
    assert session["title"] == "Fix the bug in calc.py so add works"
    stored = httpx.get(f"{proxy.url}/sessions/{session['id']}/messages").json()["messages"]
    kept = [m["message"] for m in stored if m["message"]["role"] == "system"]
    assert kept[-1]["content"] == body["messages"][1]["content"]  # in the history as it came


def test_claude_code_system_message_native_as_sent(
    start_proxy, settings_for, upstream_url, script: Script
) -> None:
    proxy = native_proxy(start_proxy, settings_for, upstream_url)
    body = claude_code_request("claude-opus-4-8")
    r = httpx.post(proxy.url + "/v1/messages?beta=true", json=body, timeout=30)
    assert r.status_code == 200, r.text
    assert script.received[-1]["messages"] == body["messages"]  # the upstream took it as is


def test_claude_code_system_message_refused_natively_is_folded(
    start_proxy, settings_for, upstream_url, script: Script
) -> None:
    """A strict chat template (llama.cpp answers 400): the request goes again, folded, and the
    next one folded straight away."""
    proxy = native_proxy(start_proxy, settings_for, upstream_url)
    body = claude_code_request("strict")
    for attempt in (1, 2):
        script.reset()
        r = httpx.post(proxy.url + "/v1/messages?beta=true", json=body, timeout=30)
        assert r.status_code == 200, r.text
        assert "Fix the bug in calc.py so add works" in r.json()["content"][0]["text"]
        assert len(script.received) == (2 if attempt == 1 else 1)
        sent = script.received[-1]["messages"]
        assert [m["role"] for m in sent] == ["user"]
        assert "<system-reminder>\nAvailable agent types" in sent[0]["content"]


@pytest.mark.parametrize("model", ["thinker", "thinker-vllm"])
@pytest.mark.parametrize("stream", [False, True])
def test_upstream_reasoning_comes_back_as_thinking(
    proxy: ServerThread, model: str, stream: bool
) -> None:
    """llama.cpp's reasoning_content (vLLM's reasoning) was dropped in translation."""
    kw = {"model": model, "max_tokens": 64, "messages": [{"role": "user", "content": "hi"}]}
    if stream:
        with client(proxy).messages.stream(**kw) as s:
            message = s.get_final_message()
    else:
        message = client(proxy).messages.create(**kw)
    assert [b.type for b in message.content] == ["thinking", "text"]
    assert message.content[0].thinking == "I should echo it."
    assert message.content[1].text.strip() == "echo: hi"
