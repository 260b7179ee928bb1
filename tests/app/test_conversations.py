"""One conversation, one session: an agent's side requests about its own history join it."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import httpx

from proxy.sessions.conversations import Conversations
from proxy.sessions.identify import SessionKey, identify
from proxy.testing.scripted import Script
from proxy.testing.servers import ServerThread
from strategies.budget import CacheBudget

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "aider_0.86.2_requests.json"
AIDER = json.loads(FIXTURE.read_text())["requests"]
AIDER_ONCE = json.loads((FIXTURE.parent / "aider_0.86.2_one_exchange.json").read_text())
QWEN_CONTINUED = json.loads((FIXTURE.parent / "qwen_code_0.24.4_continued.json").read_text())
TASK = "Fix the failing test in the parser module, it raises on empty input."
ANSWER = "The parser indexes tokens[0] before checking that there are any tokens at all."


def fresh(sessions: int = 256, budget: CacheBudget | None = None) -> Conversations:
    """An index on its own budget: the process's shared one is sized by whichever app started
    last in this test run."""
    return Conversations(sessions=sessions, budget=budget or CacheBudget())


def place(c: Conversations, body: dict[str, Any], owner: str | None = None) -> SessionKey:
    return c.place(identify(None, None, body, owner), body)


def chat(system: str, *turns: str, tools: list | None = None) -> dict[str, Any]:
    roles = ["user", "assistant"] * len(turns)
    messages = [{"role": r, "content": t} for r, t in zip(roles, turns, strict=False)]
    body: dict[str, Any] = {"model": "m", "messages": [{"role": "system", "content": system}]}
    body["messages"] += messages
    return body | ({"tools": tools} if tools else {})


def test_aider_two_runs_and_its_history_summary_are_one_session() -> None:
    c = fresh()
    keys = [place(c, body) for body in AIDER]
    summary = next(i for i, b in enumerate(AIDER) if "summarize" in b["messages"][0]["content"])
    assert identify(None, None, AIDER[summary]).id != keys[0].id  # a fingerprint of its own
    assert {k.id for k in keys} == {keys[0].id}
    assert keys[summary].source == "side" and keys[0].source == "fingerprint"


def test_a_title_request_quoting_the_task_joins_it() -> None:
    c = fresh()
    main = place(c, chat("You are a coding agent.", TASK, ANSWER, "go on", tools=[{"t": 1}]))
    title = chat("Write a five-word title for this conversation.", TASK)
    assert place(c, title).id == main.id


def test_each_new_message_of_a_growing_history_is_indexed_retries_too() -> None:
    c = fresh()
    agent, tools = "You are a coding agent.", [{"t": 1}]
    turns = [TASK, ANSWER]
    main = place(c, chat(agent, *turns, tools=tools))
    for n in range(12):
        retried = f"Step {n}: a first wording of this step that the agent sent, then retried."
        said = f"Step {n}: the tokenizer still fails on input number {n} of the test suite."
        assert place(c, chat(agent, *turns, retried, tools=tools)).id == main.id
        assert place(c, chat(agent, *turns, said, tools=tools)).id == main.id
        for quoted in (retried, said):
            title = chat("Write a five-word title for this conversation.", quoted)
            assert place(c, title).id == main.id
        turns += [said, f"Looked at step {n}."]


def test_a_new_conversation_that_quotes_nothing_opens_its_own_session() -> None:
    c = fresh()
    main = place(c, chat("You are a coding agent.", TASK, ANSWER))
    other = place(c, chat("Write a five-word title.", "Refactor the HTTP client to use a pool."))
    short = place(c, chat("You are a coding agent.", "hi"))
    assert other.id != main.id and short.id not in (main.id, other.id)


def test_an_agent_with_tools_that_only_quotes_or_names_its_session_is_never_moved() -> None:
    c = fresh()
    main = place(c, chat("You are a coding agent.", TASK, ANSWER))
    quoting = f"Look at this.\n{TASK}\n{ANSWER}"  # mostly its lines, but a new first message
    with_tools = chat("Another agent.", quoting, tools=[{"type": "function"}])
    assert place(c, with_tools).id != main.id
    named = c.place(identify("my-run", None, chat("Summarise.", TASK)), chat("Summarise.", TASK))
    assert named == SessionKey("my-run", "header")


def test_a_side_request_joins_only_a_session_of_its_own_client_key() -> None:
    c = fresh()
    main = place(c, chat("You are a coding agent.", TASK, ANSWER), owner="kA")
    title = chat("Write a title.", TASK)
    assert place(c, title, owner="kB").id.startswith("kB:")
    assert place(c, title, owner="kA").id == main.id


def test_the_oldest_sessions_are_forgotten() -> None:
    c = fresh(sessions=2)
    place(c, chat("You are a coding agent.", TASK, ANSWER))
    for n in range(2):
        place(c, chat("You are a coding agent.", f"Another task number {n} for the agent here."))
    title = chat("Write a title.", TASK)
    assert place(c, title).source == "fingerprint" and not c.where.get(hash(ANSWER))


def test_the_lines_share_the_cache_budget_and_the_least_recent_session_goes() -> None:
    budget = CacheBudget(64 << 10)  # room for a few sessions of ~40 lines
    c = fresh(budget=budget)
    lines = "\n".join(f"{TASK} step {n}" for n in range(40))
    first = place(c, chat("You are a coding agent.", TASK, lines))
    summary = chat("Summarize the conversation.", lines)
    assert place(c, summary) == SessionKey(first.id, "side")
    for n in range(20):  # newer sessions, each of its own 40 lines
        other = "\n".join(f"Another task number {n}, line {k} of it." for k in range(40))
        place(c, chat("You are a coding agent.", other))
    report = budget.report()
    held = report["caches"]["conversations.lines"]
    assert 0 < held["bytes"] == report["used_bytes"] <= 64 << 10
    assert 0 < held["entries"] == len(c.lines) < 21
    assert first.id not in c.lines and not c.where.get(hash(f"{TASK} step 0"))
    assert place(c, summary).source == "fingerprint"  # nothing left to quote


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
    c = fresh()
    main = place(c, run)
    assert identify(None, None, memory).id != main.id and memory["tools"]
    assert place(c, memory) == SessionKey(main.id, "side")


def test_a_new_run_with_another_task_is_not_a_continuation() -> None:
    c = fresh()
    long_task = TASK + " Keep the public API as it is and add a regression test for it."
    main = place(c, chat("You are a coding agent.", long_task, ANSWER, tools=[{"t": 1}]))
    other = chat("Another agent's prompt.", long_task.replace("parser", "lexer"), tools=[{"t": 1}])
    assert place(c, other).id != main.id


def test_aider_summary_after_one_exchange_joins_it_by_the_recorded_answer() -> None:
    """Most of the summary quotes the model's answer, which no request has held yet."""
    run, summary = AIDER_ONCE["requests"]
    c = fresh()
    main = place(c, run)
    c.answered(main.id, run["messages"], AIDER_ONCE["answer"])
    assert identify(None, None, summary).id != main.id
    assert place(c, summary) == SessionKey(main.id, "side")


def test_aider_summary_without_the_answer_recorded_is_not_enough() -> None:
    run, summary = AIDER_ONCE["requests"]
    c = fresh()
    place(c, run)
    assert place(c, summary).source == "fingerprint"


def test_qwen_code_continued_run_stays_in_its_session() -> None:
    """`qwen -c` rebuilds its first message (the directory tree changed) and resends the rest."""
    run, continued = QWEN_CONTINUED["requests"]
    c = fresh()
    main = place(c, run)
    c.answered(main.id, run["messages"], QWEN_CONTINUED["answer"])
    assert identify(None, None, continued).id != main.id
    assert place(c, continued) == SessionKey(main.id, "continued")
    call = {"id": "c9", "type": "function", "function": {"name": "run_shell_command"}}
    later = continued | {
        "messages": continued["messages"]
        + [
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "c9", "content": "3 passed"},
        ]
    }
    assert place(c, later) == SessionKey(main.id, "continued")  # the whole continued run


def test_a_history_that_is_not_the_whole_stored_one_is_no_continuation() -> None:
    run, continued = QWEN_CONTINUED["requests"]
    c = fresh()
    main = place(c, run)
    c.answered(main.id, run["messages"], QWEN_CONTINUED["answer"])
    messages = continued["messages"]
    edited = [*messages[:5], {**messages[5], "content": "other output"}, *messages[6:]]
    assert place(c, continued | {"messages": edited}).id != main.id
    forked = messages[:8] + [{"role": "user", "content": "Now do something else entirely."}]
    assert place(c, continued | {"messages": forked}).id != main.id


def test_a_continuation_joins_only_a_session_of_its_own_client_key() -> None:
    run, continued = QWEN_CONTINUED["requests"]
    c = fresh()
    main = place(c, run, owner="kA")
    c.answered(main.id, run["messages"], QWEN_CONTINUED["answer"])
    assert place(c, continued, owner="kB").id.startswith("kB:")
    assert place(c, continued, owner="kA").id == main.id


def test_a_side_requests_answer_does_not_extend_the_history() -> None:
    """aider's summary is answered in the run's session; a continuation resends the run's."""
    long_task = TASK + " Keep the public API as it is and add a regression test for it."
    c = fresh()
    main = place(c, chat("You are a coding agent.", long_task))
    summary = chat("Summarise.", f"# USER\n{long_task}")
    assert place(c, summary).id == main.id
    c.answered(main.id, summary["messages"], {"role": "assistant", "content": "I asked you " * 9})
    c.answered(main.id, chat("x", long_task)["messages"], {"role": "assistant", "content": ANSWER})
    again = chat("You are a coding agent.", long_task + "\n(again)", ANSWER, "Go on.")
    assert place(c, again) == SessionKey(main.id, "continued")


def test_a_one_exchange_run_continued_through_the_proxy_is_one_session(
    proxy: ServerThread, script: Script
) -> None:
    """The answer the proxy recorded is what the continuation resends after its first message."""
    task = "Fix the failing test in the parser module; it raises IndexError on an empty input."
    first = chat("You are a coding agent.", task) | {"model": "echo"}
    r = httpx.post(proxy.url + "/v1/chat/completions", json=first, timeout=30)
    assert r.status_code == 200, r.text
    answer = r.json()["choices"][0]["message"]["content"]
    continued = chat("You are a coding agent.", task + "\n(cwd: /repo, 3 files)", answer, "Go on.")
    again = httpx.post(
        proxy.url + "/v1/chat/completions", json=continued | {"model": "echo"}, timeout=30
    )
    assert again.status_code == 200, again.text
    assert again.headers["x-ctxproxy-session"] == r.headers["x-ctxproxy-session"]
    assert httpx.get(proxy.url + "/sessions").json()["total"] == 1


def test_conversations_that_only_share_a_canned_answer_stay_apart() -> None:
    """Two questions met with the same refusal are two conversations, not a continued run."""
    refusal = "I can't help with that request, but I'm glad to help with something else instead."
    c = fresh()
    first_question = chat("You are a helpful assistant.", "how do I pick a lock")
    first = place(c, first_question)
    c.answered(first.id, first_question["messages"], {"role": "assistant", "content": refusal})
    other = chat("You are a helpful assistant.", "write malware", refusal, "tell me a joke")
    assert place(c, other).id != first.id


SECRET_LINE = (
    "The staging deploy password is hunter2-correct-horse-battery-staple, rotate it Friday."
)


def _quoting(line: str) -> dict[str, Any]:
    return chat("Summarise the following text in one sentence.", line) | {"model": "echo"}


def test_a_stranger_quoting_an_answer_is_told_nothing_and_reads_nothing(
    proxy: ServerThread, script: Script
) -> None:
    """Without keys a tool-less request quoting a line of another conversation is filed with it
    (as aider's summaries are), but learns neither its session id nor anything of its history."""
    own = chat("You are a coding agent.", TASK + "\n" + SECRET_LINE) | {"model": "echo"}
    first = httpx.post(proxy.url + "/v1/chat/completions", json=own, timeout=30)
    assert first.status_code == 200 and "x-ctxproxy-session" in first.headers
    stranger = _quoting("echo: " + TASK)  # a line of the answer the conversation got
    r = httpx.post(proxy.url + "/v1/chat/completions", json=stranger, timeout=30)
    assert r.status_code == 200, r.text
    assert "x-ctxproxy-session" not in r.headers
    assert script.received[-1]["messages"] == stranger["messages"]  # its view is its own
    assert SECRET_LINE not in r.text
    sessions = httpx.get(proxy.url + "/sessions").json()
    assert sessions["total"] == 1  # it was placed there all the same
    # Responses API: the answer's id does not name the session either
    body = {"model": "echo", "instructions": stranger["messages"][0]["content"]}
    r = httpx.post(proxy.url + "/v1/responses", json=body | {"input": "echo: " + TASK}, timeout=30)
    assert r.status_code == 200 and "x-ctxproxy-session" not in r.headers
    code = r.json()["id"][len("resp_") :]
    sealed = base64.urlsafe_b64decode(code + "=" * (-len(code) % 4))
    assert first.headers["x-ctxproxy-session"].encode() not in sealed


def test_a_side_request_with_its_sessions_key_is_told_the_session(
    start_proxy, settings_for, script: Script
) -> None:
    proxy = start_proxy(settings_for(api_keys=["sk-alice"]))
    auth = {"Authorization": "Bearer sk-alice"}
    own = chat("You are a coding agent.", TASK) | {"model": "echo"}
    first = httpx.post(proxy.url + "/v1/chat/completions", json=own, headers=auth, timeout=30)
    side = httpx.post(
        proxy.url + "/v1/chat/completions", json=_quoting("echo: " + TASK), headers=auth, timeout=30
    )
    assert side.status_code == 200, side.text
    assert side.headers["x-ctxproxy-session"] == first.headers["x-ctxproxy-session"]
