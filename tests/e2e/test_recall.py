"""ctxproxy_recall end to end: offered when the view holds anything folded, answered by ctxproxy
against the session's own history, and never seen by the client, streamed or not."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from proxy.testing.scripted import Script
from proxy.testing.servers import ServerThread
from strategies.messages import original_ref
from tests.unit.strategies.helpers import agent_history, fixture, log_lines

WINDOW = 4000
SECRET = "DATABASE_PORT=54329"


def history(ask: str, steps: int = 24, size: int = 200) -> list[dict[str, Any]]:
    """An agent session whose first tool output holds SECRET, 20+ long steps before `ask`."""
    lines = log_lines(size).splitlines()
    config = "\n".join([*lines[: size // 2], SECRET, *lines[size // 2 :]])
    outputs = [config] + [
        (fixture("pytest_failures.txt") if n % 3 else log_lines(120)) for n in range(steps)
    ]
    return [*agent_history(outputs), {"role": "user", "content": ask}]


def recall_proxy(
    start_proxy: Callable, settings_for: Callable, upstream_url: str, **over: Any
) -> ServerThread:
    upstream = {"name": "scripted", "base_url": upstream_url, "context_window": WINDOW}
    return start_proxy(settings_for(upstreams=[upstream | over.pop("upstream", {})], **over))


def post(proxy: ServerThread, body: dict[str, Any], sid: str = "recall") -> httpx.Response:
    return httpx.post(
        proxy.url + "/v1/chat/completions", json=body, headers={"X-Session-Id": sid}, timeout=60
    )


def streamed(proxy: ServerThread, body: dict[str, Any]) -> list[dict[str, Any]]:
    r = post(proxy, {**body, "stream": True})
    assert r.status_code == 200, r.text
    events = [e.removeprefix("data: ") for e in r.text.split("\n\n") if e.strip()]
    assert events[-1] == "[DONE]" and events.count("[DONE]") == 1
    return [json.loads(e) for e in events[:-1]]


def offered(body: dict[str, Any]) -> bool:
    return any(t["function"]["name"] == "ctxproxy_recall" for t in body.get("tools") or [])


def exchange(proxy: ServerThread, sid: str = "recall") -> dict[str, Any]:
    listed = httpx.get(f"{proxy.url}/sessions/{sid}/exchanges").json()["data"]
    return httpx.get(f"{proxy.url}/sessions/{sid}/exchanges/{listed[-1]['seq']}").json()


@pytest.mark.parametrize("stream", [False, True])
def test_a_query_gets_back_a_value_folded_away_twenty_steps_earlier(
    start_proxy, settings_for, upstream_url: str, script: Script, stream: bool
) -> None:
    proxy = recall_proxy(start_proxy, settings_for, upstream_url)
    messages = history('RECALL {"query": "DATABASE_PORT"}')
    body = {"model": "recaller", "messages": messages, "stream_options": None}
    if stream:
        body["stream_options"] = {"include_usage": True}
        events = streamed(proxy, body)
        text = "".join(
            c["delta"].get("content") or "" for e in events for c in e["choices"] if "delta" in c
        )
        calls = [
            tc for e in events for c in e["choices"] for tc in c["delta"].get("tool_calls", [])
        ]
        finishes = [c["finish_reason"] for e in events for c in e["choices"] if c["finish_reason"]]
        usage = [e["usage"] for e in events if e.get("usage")]
    else:
        r = post(proxy, body)
        assert r.status_code == 200, r.text
        message = r.json()["choices"][0]["message"]
        text, calls = message["content"], message.get("tool_calls") or []
        finishes = [r.json()["choices"][0]["finish_reason"]]
        usage = [r.json()["usage"]]
    first, second = script.received
    # The view was folded, so the tool was offered; the first output is not in the view.
    assert offered(first) and SECRET not in json.dumps(first["messages"])
    # ctxproxy answered the call from the raw history and asked again.
    assert second["messages"][-2]["tool_calls"][0]["function"]["name"] == "ctxproxy_recall"
    assert SECRET in second["messages"][-1]["content"]
    assert SECRET in text and "recalled:" in text
    assert calls == [] and finishes == ["stop"]
    # The usage the client gets adds up both rounds.
    prompts = [len(json.dumps(b["messages"])) // 4 for b in script.received]
    assert usage[-1]["prompt_tokens"] == sum(prompts)
    x = exchange(proxy)
    [call] = x["recalls"]
    assert call["outcome"] == "ok" and SECRET in call["result"] and call["round"] == 1
    assert json.loads(call["arguments"]) == {"query": "DATABASE_PORT"}
    assert SECRET in x["response"]["content"] and not x["response"].get("tool_calls")
    assert x["exchange"]["status"] == 200 and x["exchange"]["partial"] is False
    metrics = httpx.get(proxy.url + "/metrics").text
    assert 'ctxproxy_recalls_total{outcome="ok",upstream="scripted"} 1.0' in metrics


@pytest.mark.parametrize("kind", ["history", "hash"])
def test_a_ref_from_a_marker_or_a_placeholder_returns_the_original(
    start_proxy, settings_for, upstream_url: str, script: Script, kind: str
) -> None:
    proxy = recall_proxy(start_proxy, settings_for, upstream_url)
    probe = history("", size=30)
    position = next(i for i, m in enumerate(probe) if SECRET in str(m.get("content")))
    ref = f"history:{position}" if kind == "history" else original_ref(probe[position])
    messages = history(f'RECALL {{"ref": "{ref}"}}', size=30)
    r = post(proxy, {"model": "recaller", "messages": messages})
    assert r.status_code == 200, r.text
    assert SECRET not in json.dumps(script.received[0]["messages"])  # it was folded away
    content = r.json()["choices"][0]["message"]["content"]
    assert SECRET in content and f"history:{position}" in content


@pytest.mark.parametrize("stream", [False, True])
def test_a_mixed_answer_gives_the_client_its_own_call_only(
    start_proxy, settings_for, upstream_url: str, script: Script, stream: bool
) -> None:
    proxy = recall_proxy(start_proxy, settings_for, upstream_url)
    tool = {"type": "function", "function": {"name": "read_file", "parameters": {}}}
    messages = history('RECALL {"query": "DATABASE_PORT"}')
    body = {"model": "recaller-mixed", "messages": messages, "tools": [tool]}
    if stream:
        events = streamed(proxy, body)
        deltas = [
            tc for e in events for c in e["choices"] for tc in c["delta"].get("tool_calls", [])
        ]
        assert {d["index"] for d in deltas} == {0}  # renumbered: the recall call was index 0
        assert [d["function"].get("name") for d in deltas if d.get("id")] == ["read_file"]
        args = "".join(d["function"].get("arguments") or "" for d in deltas)
        call = {"id": deltas[0]["id"], "type": "function"}
        call["function"] = {"name": "read_file", "arguments": args}
        finish = [c["finish_reason"] for e in events for c in e["choices"] if c["finish_reason"]]
        assert finish == ["tool_calls"]
    else:
        r = post(proxy, body)
        assert r.status_code == 200, r.text
        [call] = r.json()["choices"][0]["message"]["tool_calls"]
        assert r.json()["choices"][0]["finish_reason"] == "tool_calls"
    assert call["function"] == {"name": "read_file", "arguments": '{"path": "a.py"}'}
    assert len(script.received) == 1  # no further round: the client's call ends the answer
    # The client's next request, answering its own call, is a valid history.
    reply = {"role": "assistant", "content": "Looking.", "tool_calls": [call]}
    result = {"role": "tool", "tool_call_id": call["id"], "content": "print('a')"}
    r = post(proxy, {**body, "stream": False, "messages": [*messages, reply, result]})
    assert r.status_code == 200, r.text


@pytest.mark.parametrize(
    "arguments, outcome, says",
    [
        ("{not json", "bad_call", "not valid JSON"),
        ('{"ref": "/messages/0000000000000000"}', "not_found", "no message"),
        ('{"ref": "history:99999"}', "not_found", "past its end"),
        ('{"query": "("}', "bad_call", "not a valid regular expression"),
        ('{"query": ""}', "bad_call", "non-empty"),
        ('{"query": "no\\\\s+such\\\\s+thing"}', "no_match", "nothing in this conversation"),
    ],
)
def test_a_bad_call_gets_a_clear_tool_result_never_an_error(
    start_proxy,
    settings_for,
    upstream_url: str,
    script: Script,
    arguments: str,
    outcome: str,
    says: str,
) -> None:
    proxy = recall_proxy(start_proxy, settings_for, upstream_url)
    r = post(proxy, {"model": "recaller", "messages": history("RECALL " + arguments)})
    assert r.status_code == 200, r.text
    assert says in r.json()["choices"][0]["message"]["content"]
    assert [c["outcome"] for c in exchange(proxy)["recalls"]] == [outcome]


def test_a_result_over_the_cap_is_cut_with_a_note(
    start_proxy, settings_for, upstream_url: str, script: Script
) -> None:
    proxy = recall_proxy(start_proxy, settings_for, upstream_url, recall={"max_tokens": 200})
    r = post(proxy, {"model": "recaller", "messages": history('RECALL {"query": "FAILED"}')})
    assert r.status_code == 200, r.text
    content = r.json()["choices"][0]["message"]["content"]
    assert "narrow it with a more specific query" in content
    [call] = exchange(proxy)["recalls"]
    assert call["outcome"] == "truncated" and call["tokens"] <= 200


@pytest.mark.parametrize(
    "case",
    ["nothing folded", "tool_choice none", "forced function", "recall off", "upstream no tools"],
)
def test_the_tool_is_offered_only_when_something_is_folded_and_allowed(
    start_proxy, settings_for, upstream_url: str, script: Script, case: str
) -> None:
    over: dict[str, Any] = {}
    body: dict[str, Any] = {"model": "echo", "messages": history("what now?")}
    tool = {"type": "function", "function": {"name": "read_file", "parameters": {}}}
    if case == "nothing folded":
        body["messages"] = [{"role": "user", "content": "what now?"}]
    elif case == "tool_choice none":
        body |= {"tools": [tool], "tool_choice": "none"}
    elif case == "forced function":
        body |= {"tools": [tool], "tool_choice": {"type": "function", "function": tool["function"]}}
    elif case == "recall off":
        over["recall"] = False
    else:
        over["upstream"] = {"tools": False}
    proxy = recall_proxy(start_proxy, settings_for, upstream_url, **over)
    assert post(proxy, body).status_code == 200
    assert not offered(script.received[-1])
    # …while the same long history, with nothing forbidding it, gets the tool.
    script.reset()
    on = recall_proxy(start_proxy, settings_for, upstream_url)
    assert post(on, {"model": "echo", "messages": history("what now?")}, sid="b").status_code == 200
    assert offered(script.received[-1])
    assert script.received[-1]["tools"][-1]["function"]["name"] == "ctxproxy_recall"


@pytest.mark.parametrize("rounds, tools", [(1, [True, False]), (3, [True, True])])
def test_the_last_request_a_limit_allows_carries_no_tool(
    start_proxy, settings_for, upstream_url: str, script: Script, rounds: int, tools: list
) -> None:
    """The last request `rounds` allows goes without the tool, so the model must answer."""
    proxy = recall_proxy(start_proxy, settings_for, upstream_url, recall={"rounds": rounds})
    messages = history('RECALL {"query": "DATABASE_PORT"}')
    r = post(proxy, {"model": "recaller", "messages": messages})
    assert r.status_code == 200, r.text
    assert SECRET in r.json()["choices"][0]["message"]["content"]
    assert [offered(b) for b in script.received] == tools
