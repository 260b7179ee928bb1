"""OpenAI's Responses API through ctxproxy, driven by the official `openai` SDK, against the
scripted upstream that serves chat completions only (translated) or /v1/responses (native)."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import httpx
import openai
import pytest

from proxy.testing.scripted import Script
from proxy.testing.servers import ServerThread
from tests.e2e.test_sessions_audit import noisy_log

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "The weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
}


def client(proxy: ServerThread, **kw) -> openai.OpenAI:
    return openai.OpenAI(base_url=proxy.url + "/v1", api_key="client-key", max_retries=0, **kw)


def test_create_plain(proxy: ServerThread, script: Script) -> None:
    r = client(proxy).responses.with_raw_response.create(
        model="echo", instructions="Be brief.", input="hello there", max_output_tokens=50
    )
    response = r.parse()
    assert response.output_text == "echo: hello there"
    assert response.status == "completed" and response.usage.input_tokens > 0
    assert script.received[-1]["messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "hello there"},
    ]
    assert script.received[-1]["max_tokens"] == 50
    sid = r.headers["x-ctxproxy-session"]
    detail = httpx.get(f"{proxy.url}/sessions/{sid}/exchanges/1").json()
    assert detail["request"]["ctxproxy_api"] == "responses"
    assert detail["response"]["content"] == "echo: hello there"


def test_create_streamed(proxy: ServerThread) -> None:
    stream = client(proxy).responses.create(model="echo", input="one two three", stream=True)
    events = list(stream)
    kinds = [e.type for e in events]
    assert kinds[:2] == ["response.created", "response.in_progress"]
    assert kinds[-1] == "response.completed"
    deltas = [e.delta for e in events if e.type == "response.output_text.delta"]
    assert len(deltas) > 2 and "".join(deltas).strip() == "echo: one two three"
    assert events[-1].response.output_text.strip() == "echo: one two three"
    assert [e.sequence_number for e in events] == list(range(1, len(events) + 1))


@pytest.mark.parametrize("stream", [False, True])
def test_function_calls_round_trip(proxy: ServerThread, script: Script, stream: bool) -> None:
    c = client(proxy)
    items: list = [{"role": "user", "content": "Weather in Paris and Oslo?"}]
    if stream:
        with c.responses.stream(model="tools", input=items, tools=[WEATHER]) as s:
            events = list(s)
            response = s.get_final_response()
        deltas = [e for e in events if e.type == "response.function_call_arguments.delta"]
        assert deltas
    else:
        response = c.responses.create(model="tools", input=items, tools=[WEATHER])
    calls = [o for o in response.output if o.type == "function_call"]
    assert [(c.name, json.loads(c.arguments)) for c in calls] == [
        ("get_weather", {"city": "Paris"}),
        ("get_weather", {"city": "Oslo"}),
    ]
    assert script.received[-1]["tools"][0]["function"]["name"] == "get_weather"
    items += [o.model_dump(exclude_none=True) for o in response.output]
    items += [
        {"type": "function_call_output", "call_id": c.call_id, "output": "sunny"} for c in calls
    ]
    items.append({"role": "user", "content": "thanks"})
    final = c.responses.create(model="echo", input=items, tools=[WEATHER])
    assert final.output_text == "echo: thanks"
    sent = script.received[-1]["messages"]
    assert [m["role"] for m in sent] == ["user", "assistant", "tool", "tool", "user"]
    assert [t["id"] for t in sent[1]["tool_calls"]] == [c.call_id for c in calls]


def test_previous_response_id_served_from_store(proxy: ServerThread, script: Script) -> None:
    c = client(proxy)
    first = c.responses.create(model="echo", instructions="Be brief.", input="first question")
    second = c.responses.create(
        model="echo", previous_response_id=first.id, input="second question"
    )
    assert second.output_text == "echo: second question"
    assert [m["content"] for m in script.received[-1]["messages"]] == [
        "Be brief.",
        "first question",
        "echo: first question",
        "second question",
    ]
    with pytest.raises(openai.BadRequestError) as refused:
        c.responses.create(model="echo", previous_response_id="resp_unknown", input="x")
    assert refused.value.body["param"] == "previous_response_id"
    unstored = c.responses.create(model="echo", input="private", store=False)
    with pytest.raises(openai.BadRequestError):
        c.responses.create(model="echo", previous_response_id=unstored.id, input="x")


def test_long_history_into_4k_window_native(
    start_proxy, settings_for, upstream_url, script: Script
) -> None:
    proxy = start_proxy(
        settings_for(
            upstreams=[
                {
                    "name": "native",
                    "base_url": upstream_url,
                    "context_window": 4096,
                    "apis": ["chat", "responses"],
                }
            ],
            recall={"translate": False},  # native even once folded: no recall tool
        )
    )
    items: list[dict] = [{"role": "user", "content": "Make the tests pass."}]
    for step in range(30):
        items.append(
            {
                "type": "reasoning",
                "id": f"rs_{step}",
                "summary": [],
                "encrypted_content": f"e{step}",
            }
        )
        items.append(
            {
                "type": "function_call",
                "call_id": f"c{step}",
                "name": "shell",
                "arguments": '{"cmd": "pytest"}',
            }
        )
        items.append(
            {"type": "function_call_output", "call_id": f"c{step}", "output": noisy_log(step)}
        )
    items.append({"role": "user", "content": "what now?"})
    r = client(proxy).responses.with_raw_response.create(model="any", input=items)
    assert r.parse().output_text == "native: what now?"
    assert r.headers["x-ctxproxy-compaction"] != "none"
    sent = script.received[-1]["input"]
    assert sent[-1] == items[-1]
    # The task hosts the forget marker, in the user's voice: the user's text first.
    assert sent[0]["role"] == "user" and "earlier messages" in json.dumps(sent[0])
    assert json.dumps(sent[0]).count(json.dumps(items[0]["content"]).strip('"')) == 1
    assert len(sent) < len(items)
    # Untouched steps go as they came, reasoning items with their encrypted content included.
    assert any(i.get("encrypted_content") for i in sent if i in items)


def test_upstream_error_in_openai_envelope(proxy: ServerThread) -> None:
    with pytest.raises(openai.RateLimitError) as exc:
        client(proxy).responses.create(model="fail-429", input="x")
    assert exc.value.body["message"] == "scripted failure 429"


def test_previous_response_id_of_a_native_answer(
    start_proxy, settings_for, upstream_url, script: Script
) -> None:
    proxy = start_proxy(
        settings_for(upstreams=[{"name": "n", "base_url": upstream_url, "apis": ["responses"]}])
    )
    c = client(proxy)
    first = c.responses.create(model="any", input="first question")
    assert first.output_text == "native: first question"
    assert first.id != "resp_native"  # ctxproxy's id: it names the stored exchange
    second = c.responses.create(model="any", previous_response_id=first.id, input="again")
    assert second.output_text == "native: again"
    sent = script.received[-1]["input"]
    assert sent[0] == {"type": "message", "role": "user", "content": "first question"}
    assert sent[1]["content"][0]["text"] == "native: first question"
    assert sent[2] == {"role": "user", "content": "again"}
    assert "previous_response_id" not in script.received[-1]  # the history is all there


def test_codex_session_header_names_the_session(proxy: ServerThread) -> None:
    c = client(proxy, default_headers={"session_id": "0199-codex-conv"})
    r = c.responses.with_raw_response.create(model="echo", input="hi")
    assert r.headers["x-ctxproxy-session"] == "0199-codex-conv"


def codex_request(model: str, stream: bool) -> dict:
    """Codex 0.171.0's first request as it sent it (tests/fixtures), for this model."""
    sent = json.loads((FIXTURES / "codex_0.171.0_first_request.json").read_text())["body"]
    return {**sent, "model": model, "stream": stream}


def final_response(r: httpx.Response, stream: bool) -> dict:
    if not stream:
        return r.json()
    events = [json.loads(line[6:]) for line in r.text.split("\n") if line.startswith("data: ")]
    return events[-1]["response"]


@pytest.mark.parametrize("stream", [False, True])
def test_codex_namespaced_tool_called_and_web_search_noted(
    proxy: ServerThread, script: Script, stream: bool, caplog: pytest.LogCaptureFixture
) -> None:
    """Its grouped multi_agent_v1 tools reach the model and its calls come back namespaced;
    web_search, which no local model runs, is left out with a note in the audit and the log."""
    caplog.set_level(logging.INFO, logger="ctxproxy.access")
    body = codex_request("call:multi_agent_v1__spawn_agent", stream)
    r = httpx.post(proxy.url + "/v1/responses", json=body, timeout=30)
    assert r.status_code == 200, r.text
    (call,) = final_response(r, stream)["output"]
    assert (call["type"], call["name"], call["namespace"]) == (
        "function_call",
        "spawn_agent",
        "multi_agent_v1",
    )
    offered = [t["function"]["name"] for t in script.received[-1]["tools"]]
    assert "multi_agent_v1__wait_agent" in offered and len(offered) == 4
    sent = script.received[-1]["messages"]
    assert [m["role"] for m in sent] == ["system", "user", "user"]  # one system message
    session = httpx.get(proxy.url + "/sessions").json()["data"][0]
    assert session["title"] == "Fix the bug in calc.py so add works"
    detail = httpx.get(f"{proxy.url}/sessions/{session['id']}/exchanges/1").json()
    removed = detail["request"]["ctxproxy_tools_removed"]
    assert [t["type"] for t in removed] == ["web_search"]
    line = next(json.loads(x.getMessage()) for x in caplog.records if x.name == "ctxproxy.access")
    assert line["tools_removed"] == ["web_search"]


@pytest.mark.parametrize("model", ["thinker", "thinker-vllm"])
@pytest.mark.parametrize("stream", [False, True])
def test_upstream_reasoning_comes_back_as_a_reasoning_item(
    proxy: ServerThread, model: str, stream: bool
) -> None:
    c = client(proxy)
    if stream:
        with c.responses.stream(model=model, input="hi") as s:
            deltas = [e.delta for e in s if e.type == "response.reasoning_text.delta"]
            response = s.get_final_response()
        assert "".join(deltas) == "I should echo it."
    else:
        response = c.responses.create(model=model, input="hi")
    reasoning, message = response.output
    assert reasoning.type == "reasoning" and reasoning.content[0].text == "I should echo it."
    assert response.output_text.strip() == "echo: hi"


def test_codex_developer_items_refused_natively_are_folded(
    start_proxy, settings_for, upstream_url, script: Script
) -> None:
    """Its two leading developer messages, natively to an upstream whose template takes one
    system message: refused (400), sent again as one, answered."""
    upstream = {"name": "native", "base_url": upstream_url, "apis": ["chat", "responses"]}
    proxy = start_proxy(settings_for(upstreams=[upstream], recall={"translate": False}))
    body = codex_request("strict", stream=False)
    r = httpx.post(proxy.url + "/v1/responses", json=body, timeout=30)
    assert r.status_code == 200, r.text
    assert r.json()["output"][0]["content"][0]["text"].startswith("native: ")
    first, second = script.received
    assert [i.get("role") for i in first["input"]] == ["developer", "developer", "user", "user"]
    assert [i.get("role") for i in second["input"]] == ["developer", "user", "user"]
    assert second["input"][1:] == body["input"][2:]  # the user items as Codex sent them
