"""One conversation, one session: an agent's side requests about its own history join it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx

from proxy.conversations import Conversations
from proxy.sessions import SessionKey, identify
from tests.scripted import Script
from tests.servers import ServerThread

FIXTURE = Path(__file__).parent / "fixtures" / "aider_0.86.2_requests.json"
AIDER = json.loads(FIXTURE.read_text())["requests"]
TASK = "Fix the failing test in the parser module, it raises on empty input."
ANSWER = "The parser indexes tokens[0] before checking that there are any tokens at all."


def place(c: Conversations, body: dict[str, Any], owner: str | None = None) -> SessionKey:
    return c.place(identify(None, None, body, owner), body)


def chat(system: str, *turns: str, tools: list | None = None) -> dict[str, Any]:
    roles = ["user", "assistant"] * len(turns)
    messages = [{"role": r, "content": t} for r, t in zip(roles, turns, strict=False)]
    body: dict[str, Any] = {"model": "m", "messages": [{"role": "system", "content": system}]}
    body["messages"] += messages
    return body | ({"tools": tools} if tools else {})


def test_aider_two_runs_and_its_history_summary_are_one_session() -> None:
    c = Conversations()
    keys = [place(c, body) for body in AIDER]
    summary = next(i for i, b in enumerate(AIDER) if "summarize" in b["messages"][0]["content"])
    assert identify(None, None, AIDER[summary]).id != keys[0].id  # a fingerprint of its own
    assert {k.id for k in keys} == {keys[0].id}
    assert keys[summary].source == "side" and keys[0].source == "fingerprint"


def test_a_title_request_quoting_the_task_joins_it() -> None:
    c = Conversations()
    main = place(c, chat("You are a coding agent.", TASK, ANSWER, "go on", tools=[{"t": 1}]))
    title = chat("Write a five-word title for this conversation.", TASK)
    assert place(c, title).id == main.id


def test_a_new_conversation_that_quotes_nothing_opens_its_own_session() -> None:
    c = Conversations()
    main = place(c, chat("You are a coding agent.", TASK, ANSWER))
    other = place(c, chat("Write a five-word title.", "Refactor the HTTP client to use a pool."))
    short = place(c, chat("You are a coding agent.", "hi"))
    assert other.id != main.id and short.id not in (main.id, other.id)


def test_an_agent_with_tools_that_only_quotes_or_names_its_session_is_never_moved() -> None:
    c = Conversations()
    main = place(c, chat("You are a coding agent.", TASK, ANSWER))
    quoting = f"Look at this.\n{TASK}\n{ANSWER}"  # mostly its lines, but a new first message
    with_tools = chat("Another agent.", quoting, tools=[{"type": "function"}])
    assert place(c, with_tools).id != main.id
    named = c.place(identify("my-run", None, chat("Summarise.", TASK)), chat("Summarise.", TASK))
    assert named == SessionKey("my-run", "header")


def test_a_side_request_joins_only_a_session_of_its_own_client_key() -> None:
    c = Conversations()
    main = place(c, chat("You are a coding agent.", TASK, ANSWER), owner="kA")
    title = chat("Write a title.", TASK)
    assert place(c, title, owner="kB").id.startswith("kB:")
    assert place(c, title, owner="kA").id == main.id


def test_the_oldest_sessions_are_forgotten() -> None:
    c = Conversations(sessions=2)
    place(c, chat("You are a coding agent.", TASK, ANSWER))
    for n in range(2):
        place(c, chat("You are a coding agent.", f"Another task number {n} for the agent here."))
    title = chat("Write a title.", TASK)
    assert place(c, title).source == "fingerprint" and not c.where.get(hash(ANSWER))


def test_aider_through_the_proxy_is_one_session(proxy: ServerThread, script: Script) -> None:
    for body in AIDER:
        body = {**body, "model": "echo"}
        r = httpx.post(proxy.url + "/v1/chat/completions", json=body, timeout=30)
        assert r.status_code == 200, r.text
    sessions = httpx.get(proxy.url + "/sessions").json()
    assert sessions["total"] == 1
    (row,) = sessions["data"]
    assert row["totals"]["exchanges"] == len(AIDER)


def test_qwen_code_memory_subagent_joins_the_run_it_remembers() -> None:
    """Its own system prompt and tools, and the run's conversation resent as messages."""
    fixture = FIXTURE.parent / "qwen_code_0.24.4_requests.json"
    run, memory = json.loads(fixture.read_text())["requests"]
    c = Conversations()
    main = place(c, run)
    assert identify(None, None, memory).id != main.id and memory["tools"]
    assert place(c, memory) == SessionKey(main.id, "side")


def test_a_new_run_with_another_task_is_not_a_continuation() -> None:
    c = Conversations()
    long_task = TASK + " Keep the public API as it is and add a regression test for it."
    main = place(c, chat("You are a coding agent.", long_task, ANSWER, tools=[{"t": 1}]))
    other = chat("Another agent's prompt.", long_task.replace("parser", "lexer"), tools=[{"t": 1}])
    assert place(c, other).id != main.id
