"""Sessions end to end: an agent loop through the proxy, then the audit API tells what happened."""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path

import httpx
import openai

from tests.e2e.test_cli_serve import Proxy, write_config
from tests.scripted import Script
from tests.servers import ServerThread


def noisy_log(turn: int) -> str:
    lines = [
        f"2026-12-02 10:{turn:02d}:{i % 60:02d} INFO db: connection attempt {i} to "
        f"postgres://db:5432/app ok, pool size {i % 7}"
        for i in range(120)
    ]
    lines += [
        "Traceback (most recent call last):",
        '  File "/app/service.py", line 88, in handle',
        "    return cfg.database_url",
        f"AttributeError: 'Config' object has no attribute 'database_url' (turn {turn})",
    ]
    return "\n".join(lines)


def test_agent_loop_audit_matches_what_upstream_received(
    start_proxy, settings_for, upstream_url: str, script: Script
) -> None:
    proxy: ServerThread = start_proxy(
        settings_for(
            upstreams=[{"name": "scripted", "base_url": upstream_url, "context_window": 8000}]
        )
    )
    client = openai.OpenAI(
        base_url=proxy.url + "/v1", api_key="x", default_headers={"X-Session-Id": "agent-1"}
    )
    messages: list[dict] = [
        {"role": "system", "content": "You fix bugs."},
        {"role": "user", "content": "Make the test suite pass."},
    ]
    for turn in range(20):
        r = client.chat.completions.with_raw_response.create(model="tools", messages=messages)
        assert r.headers["x-ctxproxy-session"] == "agent-1"
        answer = r.parse().choices[0].message
        messages.append(answer.model_dump(exclude_none=True))
        for call in answer.tool_calls:
            messages.append({"role": "tool", "tool_call_id": call.id, "content": noisy_log(turn)})

    audit = httpx.Client(base_url=proxy.url, timeout=10)
    exchanges = audit.get("/sessions/agent-1/exchanges").json()["data"]
    assert isinstance(exchanges, list), exchanges
    assert len(exchanges["exchanges"] if isinstance(exchanges, dict) else exchanges) == 20
    fired = 0
    for seq in range(1, 21):
        detail = audit.get(f"/sessions/agent-1/exchanges/{seq}").json()
        sent = json.loads(script.raw[seq - 1])
        assert json.dumps(detail["compiled_request"]["messages"]) == json.dumps(sent["messages"])
        assert (
            detail["request"]["messages"][-1]
            == (messages[: len(detail["request"]["messages"])][-1])
        )
        fired += bool(detail["events"])
    assert fired >= 1, "an 8k window with 40 noisy logs must have compacted"
    session = audit.get("/sessions/agent-1").json()
    totals = session["session"]["totals"]
    assert totals["tokens_original"] > totals["tokens_compiled"]
    history = audit.get("/sessions/agent-1/messages").json()
    # The SDK sends each answer back in its own form; that is no branch of the conversation.
    assert history["branch_count"] == 1
    raw = [m["message"] if "message" in m else m for m in history["messages"]]
    # The raw history: the last request in full, never compacted, then its answer.
    sent_last = messages[:-2]  # the last two tool results were never sent
    assert [m.get("content") for m in raw] == [m.get("content") for m in sent_last]
    assert raw[-1]["tool_calls"] == sent_last[-1]["tool_calls"]


def test_edited_history_branches_instead_of_rewriting(proxy: ServerThread, script: Script) -> None:
    c = openai.OpenAI(base_url=proxy.url + "/v1", api_key="x")
    base = [
        {"role": "system", "content": "s"},
        {"role": "user", "content": "task"},
        {"role": "assistant", "content": "first try"},
    ]
    r1 = c.chat.completions.with_raw_response.create(
        model="echo", messages=[*base, {"role": "user", "content": "go on"}]
    )
    r2 = c.chat.completions.with_raw_response.create(
        model="echo",
        messages=[
            *base[:2],
            {"role": "assistant", "content": "edited"},
            {"role": "user", "content": "again"},
        ],
    )
    sid = r1.headers["x-ctxproxy-session"]
    assert sid == r2.headers["x-ctxproxy-session"] and sid.startswith("fp-")
    history = httpx.get(f"{proxy.url}/sessions/{sid}/messages").json()
    contents = [(m.get("message") or m).get("content") for m in history["messages"]]
    assert contents[:4] == ["s", "task", "edited", "again"]
    assert history["branch_count"] == 2
    assert (
        httpx.get(f"{proxy.url}/sessions/{sid}/exchanges/1").json()["request"]["messages"][2][
            "content"
        ]
        == "first try"
    )


def test_history_survives_proxy_killed_mid_stream(tmp_path: Path, upstream_url: str) -> None:
    cfg = write_config(tmp_path, upstream_url)
    first = Proxy(["serve", "--config", str(cfg)], tmp_path)
    sent = [{"role": "user", "content": "stream slowly please"}]
    with httpx.stream(
        "POST",
        first.url + "/v1/chat/completions",
        timeout=10,
        headers={"X-Session-Id": "crash-1"},
        json={"model": "slow", "messages": sent, "stream": True},
    ) as r:
        lines = r.iter_lines()
        assert next(lines).startswith("data: ")
        first.stop(signal.SIGKILL)
    second = Proxy(["serve", "--config", str(cfg)], tmp_path)
    try:
        history = httpx.get(second.url + "/sessions/crash-1/messages").json()
        assert [(m.get("message") or m) for m in history["messages"]][0] == sent[0]
        exchange = httpx.get(second.url + "/sessions/crash-1/exchanges/1").json()
        # Not left pending: the restart closed it as interrupted, keeping the text the client
        # was sent (saved before it was relayed); PostgreSQL: tests/e2e/test_kill.py.
        assert exchange["exchange"]["pending"] is False and exchange["exchange"]["partial"]
        assert exchange["error"]["code"] == "interrupted"
        assert exchange["response"]["content"].startswith("0 ")
        assert exchange["request"]["messages"] == sent
    finally:
        second.stop()


def test_disconnected_stream_stored_as_partial(proxy: ServerThread, script: Script) -> None:
    with httpx.stream(
        "POST",
        proxy.url + "/v1/chat/completions",
        timeout=10,
        headers={"X-Session-Id": "gone-1"},
        json={"model": "slow", "messages": [{"role": "user", "content": "x"}], "stream": True},
    ) as r:
        lines = r.iter_lines()
        next(lines), next(lines)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        x = httpx.get(proxy.url + "/sessions/gone-1/exchanges/1").json()
        if x["exchange"]["status"] is not None:
            break
        time.sleep(0.05)
    assert x["exchange"]["partial"] is True
    assert x["response"]["content"].startswith("0 ")


def test_upstream_overflow_heals_with_one_retry(
    start_proxy, settings_for, upstream_url: str, script: Script
) -> None:
    # Configured as 16k, but the server's real window is 2k: the first view is refused.
    proxy = start_proxy(
        settings_for(
            upstreams=[{"name": "scripted", "base_url": upstream_url, "context_window": 16000}]
        )
    )
    history = [
        {"role": "system", "content": "You fix bugs."},
        {"role": "user", "content": "Make the test suite pass."},
    ]
    for turn in range(4):
        call = {
            "id": f"c{turn}",
            "type": "function",
            "function": {"name": "run_tests", "arguments": "{}"},
        }
        history += [
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": f"c{turn}", "content": noisy_log(turn)},
        ]
    history.append({"role": "user", "content": "And now?"})
    r = httpx.post(
        proxy.url + "/v1/chat/completions",
        headers={"X-Session-Id": "heal-1"},
        json={"model": "tight", "messages": history, "max_tokens": 100},
        timeout=30,
    )
    assert r.status_code == 200, r.text
    assert len(script.received) == 2  # refused once, then served
    detail = httpx.get(proxy.url + "/sessions/heal-1/exchanges/1").json()
    assert len(detail["attempts"]) == 1
    assert detail["attempts"][0]["upstream_window"] == 2000
    assert detail["exchange"]["window"] == 2000
    assert detail["compiled_request"]["messages"] == script.received[-1]["messages"]
    assert int(r.headers["x-ctxproxy-budget"]) < 2000


def test_upstream_overflow_that_cannot_heal_is_one_clean_400(
    start_proxy, settings_for, upstream_url: str, script: Script
) -> None:
    proxy = start_proxy(
        settings_for(
            upstreams=[{"name": "scripted", "base_url": upstream_url, "context_window": 16000}]
        )
    )
    # A system prompt is never cut: only the client can shorten it.
    huge = [{"role": "system", "content": "word " * 3000}, {"role": "user", "content": "hi"}]
    r = httpx.post(
        proxy.url + "/v1/chat/completions",
        timeout=30,
        json={"model": "tight", "messages": huge, "max_tokens": 10},
    )
    assert r.status_code == 400
    err = r.json()["error"]
    assert err["code"] == "context_length_exceeded" and "2000" in err["message"]


def test_a_refused_request_keeps_its_figures_and_an_sdk_retry_is_not_a_turn(
    start_proxy, settings_for, upstream_url: str, script: Script
) -> None:
    proxy: ServerThread = start_proxy(
        settings_for(
            upstreams=[{"name": "scripted", "base_url": upstream_url, "context_window": 4000}]
        )
    )
    # A tool schema bigger than the window: no compaction of the messages can make it fit.
    tool = {"name": "read_log", "description": "make check " * 3000, "parameters": {}}
    r = httpx.post(
        proxy.url + "/v1/chat/completions",
        headers={"X-Session-Id": "refused"},
        json={
            "model": "echo",
            "messages": [{"role": "user", "content": "Read the log"}],
            "tools": [{"type": "function", "function": tool}],
        },
        timeout=30,
    )
    assert r.status_code == 400 and not script.received  # nothing went upstream
    err = r.json()["error"]
    x = httpx.get(proxy.url + "/sessions/refused/exchanges/1").json()
    e = x["exchange"]
    assert e["error_code"] == "context_length_exceeded" and e["status"] == 400
    # The figures the client was told are the ones kept: needed, budget, window.
    assert f"needs at least {e['tokens_compiled']} tokens" in err["message"]
    assert f"leaves {e['budget']} for the prompt" in err["message"]
    assert "tool definitions" in err["message"]  # the tools are the fixed part to blame
    assert e["window"] == 4000 and e["tokens_compiled"] > e["budget"] > 0
    assert e["tokens_original"] > 4000  # as the client sent it, tools included
    assert x["compiled_request"]["messages"] == []

    # The SDK retries a 503 twice: one turn, three requests.
    sdk = openai.OpenAI(
        base_url=proxy.url + "/v1",
        api_key="x",
        default_headers={"X-Session-Id": "retried"},
        max_retries=2,
    )
    try:
        sdk.chat.completions.create(model="fail-503", messages=[{"role": "user", "content": "hi"}])
    except openai.InternalServerError:
        pass
    s = httpx.get(proxy.url + "/sessions/retried").json()["session"]
    assert (s["turns"], s["totals"]["exchanges"], s["totals"]["retries"]) == (1, 3, 2)
    assert s["totals"]["errors"] == 3 and s["title"] == "hi"
    rows = httpx.get(proxy.url + "/sessions/retried/exchanges").json()["data"]
    assert [(r["seq"], r["turn"], r["retry_of"]) for r in rows] == [
        (1, 1, None),
        (2, 1, 1),
        (3, 1, 1),
    ]
