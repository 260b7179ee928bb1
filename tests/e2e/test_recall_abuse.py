"""ctxproxy_recall cannot be turned against the proxy: hostile queries, refs, ranges and call
counts from the model end quickly, fit the window, and come back as tool results."""

from __future__ import annotations

import json
import signal
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from proxy.compile.tokens import TokenCounter
from proxy.testing.scripted import Script
from tests.e2e.test_cli_serve import Proxy
from tests.e2e.test_recall import WINDOW, exchange, history, post, recall_proxy, streamed

EVIL = "a" * 26 + "!"  # `(a+)+$` backtracks 2^26 ways on this line in Python's re


def planted(ask: str) -> list[dict[str, Any]]:
    """A folded agent history whose first tool output holds EVIL, a line anyone could plant."""
    messages = history(ask)
    first_tool = next(m for m in messages if m["role"] == "tool")
    first_tool["content"] += "\n" + EVIL
    return messages


def recall_calls(calls: list[Any]) -> str:
    return "RECALL " + json.dumps(calls)


def answer(proxy: Any, messages: list[dict[str, Any]], stream: bool, sid: str) -> str:
    """The client's text, streamed or not; a stream must end whole, with one [DONE]."""
    body = {"model": "recaller", "messages": messages}
    if stream:
        events = streamed_as(proxy, body, sid)
        assert not [e for e in events if "error" in e]
        return "".join(c["delta"].get("content") or "" for e in events for c in e["choices"])
    r = post(proxy, body, sid=sid)
    assert r.status_code == 200, r.text
    return r.json()["choices"][0]["message"]["content"]


def streamed_as(proxy: Any, body: dict[str, Any], sid: str) -> list[dict[str, Any]]:
    if sid == "recall":
        return streamed(proxy, body)
    r = post(proxy, {**body, "stream": True}, sid=sid)
    assert r.status_code == 200, r.text
    events = [e.removeprefix("data: ") for e in r.text.split("\n\n") if e.strip()]
    assert events[-1] == "[DONE]" and events.count("[DONE]") == 1
    return [json.loads(e) for e in events[:-1]]


def test_eight_pathological_regexes_end_fast_and_another_session_is_not_held_up(
    start_proxy, settings_for, upstream_url: str, script: Script
) -> None:
    proxy = recall_proxy(start_proxy, settings_for, upstream_url)
    calls = [{"query": q} for q in ["(a+)+$", "(a|a)+$", "(a|aa)+$", "(a*)*$"] * 2]
    done: dict[str, Any] = {}

    def hostile() -> None:
        started = time.monotonic()
        try:
            done["status"] = post(
                proxy,
                {"model": "recaller", "messages": planted(recall_calls(calls))},
                sid="hostile",
            ).status_code
        except httpx.HTTPError as exc:
            done["status"] = repr(exc)
        done["seconds"] = time.monotonic() - started

    worker = threading.Thread(target=hostile)
    worker.start()
    while len(script.received) < 1 and worker.is_alive():  # the searches are starting now
        time.sleep(0.005)
    started = time.monotonic()
    plain = httpx.post(
        proxy.url + "/v1/chat/completions",
        json={"model": "echo", "messages": [{"role": "user", "content": "hi"}]},
        headers={"X-Session-Id": "bystander"},
        timeout=30,
    )
    bystander = time.monotonic() - started
    worker.join(60)
    assert plain.status_code == 200 and bystander < 0.5, bystander
    assert done["status"] == 200 and done["seconds"] < 3, done
    recalls = exchange(proxy, "hostile")["recalls"]
    assert len(recalls) == 8 and recalls[0]["outcome"] == "no_match"  # and was searched
    assert not {c["outcome"] for c in recalls} & {"error", "timeout", "over_cap"}


@pytest.mark.parametrize("stream", [False, True])
def test_a_ref_of_5000_digits_is_past_the_end(
    start_proxy, settings_for, upstream_url: str, script: Script, stream: bool
) -> None:
    proxy = recall_proxy(start_proxy, settings_for, upstream_url)
    messages = history(recall_calls([{"ref": "history:" + "9" * 5000}]))
    text = answer(proxy, messages, stream, "recall")
    assert "is past its end" in text
    assert [c["outcome"] for c in exchange(proxy)["recalls"]] == ["not_found"]
    assert exchange(proxy)["exchange"]["status"] == 200


def test_a_huge_range_is_clamped_to_the_history_before_it_is_walked(
    start_proxy, settings_for, upstream_url: str, script: Script
) -> None:
    proxy = recall_proxy(start_proxy, settings_for, upstream_url)
    messages = history(recall_calls([{"ref": "history:0-1000000000"}]))
    started = time.monotonic()
    text = answer(proxy, messages, False, "recall")
    assert time.monotonic() - started < 2
    assert "history:0 (system)" in text and "cut here" in text
    [call] = exchange(proxy)["recalls"]
    assert call["outcome"] == "truncated" and call["tokens"] <= 2000


def forwarded_tokens(body: dict[str, Any]) -> int:
    """What a forwarded request takes, by the proxy's own (uncalibrated) count."""
    counter = TokenCounter()
    return counter.count_messages(body["messages"]) + counter.count_tools(body.get("tools"))


@pytest.mark.parametrize("stream", [False, True])
def test_3000_calls_in_one_answer_keep_every_round_within_the_window(
    start_proxy, settings_for, upstream_url: str, script: Script, stream: bool
) -> None:
    proxy = recall_proxy(start_proxy, settings_for, upstream_url)
    messages = history('RECALL 3000*{"query": "DATABASE_PORT"}')
    started = time.monotonic()
    text = answer(proxy, messages, stream, "recall")
    assert time.monotonic() - started < 10
    assert len(script.received) == 2
    assert max(forwarded_tokens(b) for b in script.received) <= WINDOW
    assert "more recall calls in this answer were not run" in text
    recalls = exchange(proxy)["recalls"]
    outcomes = [c["outcome"] for c in recalls]
    assert len(outcomes) == 3000 and outcomes.count("over_cap") == 3000 - 8
    assert "DATABASE_PORT" in recalls[0]["result"]  # the first was answered, the rest told


def test_calls_past_the_cap_are_told_so(
    start_proxy, settings_for, upstream_url: str, script: Script
) -> None:
    proxy = recall_proxy(
        start_proxy, settings_for, upstream_url, recall={"max_calls": 3, "max_tokens": 200}
    )
    calls = [{"ref": f"history:{n}"} for n in range(5)]
    text = answer(proxy, history(recall_calls(calls)), False, "recall")
    second = script.received[1]["messages"]
    assert len(second[-4]["tool_calls"]) == 3  # the two over the cap are not in the view
    assert "2 more recall calls in this answer were not run (at most 3" in text
    assert [c["outcome"] for c in exchange(proxy)["recalls"]][3:] == ["over_cap"] * 2


BAD_CALLS: list[tuple[Any, str, str]] = [
    ({"ref": "history:" + "1" * 20}, "not_found", "past its end"),
    ({"ref": 5}, "bad_call", "non-empty"),
    ({"query": ["a"]}, "bad_call", "non-empty"),
    ([1, 2], "bad_call", "pass an object"),
    ("{" + " " * 9000 + "}", "bad_call", "characters"),  # too long to be a call
    ("[" * 1200 + "]" * 1200, "bad_call", "not valid JSON"),  # nested past the parser's depth
    ({"query": "x" * 1100}, "bad_call", "keep it under"),
    ({"query": r"(?<!x)DATABASE_PORT=(\d+)\1"}, "ok", "RE2 cannot run this pattern"),
]


@pytest.mark.parametrize("stream", [False, True])
def test_every_bad_call_is_a_tool_result(
    start_proxy, settings_for, upstream_url: str, script: Script, stream: bool
) -> None:
    window = {"context_window": 12000}  # room for all eight calls (a window too small: above)
    proxy = recall_proxy(start_proxy, settings_for, upstream_url, upstream=window)
    calls = [args for args, _, _ in BAD_CALLS]
    text = answer(proxy, history(recall_calls(calls)), stream, "recall")
    x = exchange(proxy)
    assert x["exchange"]["status"] == 200
    assert [c["outcome"] for c in x["recalls"]] == [outcome for _, outcome, _ in BAD_CALLS]
    for call, (_, _, says) in zip(x["recalls"], BAD_CALLS, strict=True):
        assert says in call["result"], call
    assert "recalled: " in text  # the model was given the results and answered


def test_a_round_killed_midway_keeps_its_calls_in_the_record(
    tmp_path: Path, upstream_url: str, script: Script
) -> None:
    cfg = tmp_path / "config.yaml"
    cfg.write_text(
        f"database_url: sqlite:///{tmp_path / 'proxy.db'}\n"
        f"upstreams:\n  - {{name: scripted, kind: openai, base_url: '{upstream_url}', "
        f"context_window: {WINDOW}}}\n"
    )
    first = Proxy(["serve", "--config", str(cfg)], tmp_path)
    body = {
        "model": "recaller-hang",
        "messages": history(recall_calls([{"query": "DATABASE_PORT"}])),
    }

    def ask() -> None:
        try:
            httpx.post(
                first.url + "/v1/chat/completions",
                json=body,
                headers={"X-Session-Id": "killed"},
                timeout=30,
            )
        except httpx.HTTPError:
            pass  # the proxy is killed under it

    worker = threading.Thread(target=ask)
    worker.start()
    deadline = time.monotonic() + 20
    while len(script.received) < 2 and time.monotonic() < deadline:  # round 2 is hanging
        time.sleep(0.02)
    first.stop(signal.SIGKILL)
    worker.join(10)
    second = Proxy(["serve", "--config", str(cfg)], tmp_path)
    try:
        x = httpx.get(second.url + "/sessions/killed/exchanges/1").json()
        assert x["exchange"]["pending"] is False and x["error"]["code"] == "interrupted"
        [call] = x["recalls"]
        assert call["outcome"] in ("ok", "truncated") and "DATABASE_PORT" in call["result"]
    finally:
        second.stop()
