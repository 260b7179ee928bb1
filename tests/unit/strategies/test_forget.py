"""forget: old whole steps leave behind one marker; the working set, the task and the user's
words stay; roles keep alternating as the client sent them."""

from __future__ import annotations

import json

from strategies.compact import MARKER
from strategies.invariants import pairing_problems
from strategies.messages import iterations
from strategies.options import ForgetOptions, TieredOptions
from strategies.pipeline import Plan, compile_view, request_points
from tests.unit.strategies.helpers import COUNTER, agent_history, call, fixture, log_lines


def plan(budget: int, keep_first: float = 0.2) -> Plan:
    options = {
        "tiered": TieredOptions(keep_recent=2),
        "forget": ForgetOptions(keep_recent=2, keep_first=keep_first),
    }
    return Plan(("traceback", "tiered", "forget"), budget, budget // 2, budget, options)


def turn_by_turn(history: list[dict], budget: int):
    prior, result = None, None
    for end in request_points(history)[1:]:
        result = compile_view(
            history[:end], plan(budget), COUNTER.count_message, lambda r: r + 3, prior=prior
        )
        prior = result.state
    return result


def long_session() -> list[dict]:
    outputs = [log_lines(60, f"step {n} " + "{i} ok") for n in range(40)]
    history = agent_history(outputs)
    # A user turn in the middle, its answer, then more steps; the newest error near the end.
    history[40:40] = [
        {"role": "user", "content": "Also keep the CHANGELOG in mind."},
        {"role": "assistant", "content": "Noted."},
    ]
    return history + agent_history([fixture("pytest_failures.txt"), "ok", "ok"])[2:]


def test_old_steps_are_forgotten_behind_one_marker_that_says_what_and_where():
    history = long_session()
    view = turn_by_turn(history, 4000).view
    markers = [m for m in view if MARKER in json.dumps(m.get("content"), ensure_ascii=False)]
    assert len(markers) == 1
    text = json.dumps(markers[0]["content"], ensure_ascii=False)
    assert "earlier messages" in text and "steps" in text and "history positions" in text
    assert "ran `pytest -x` ×" in text  # what the agent did, from its calls
    assert "ctxproxy_recall" in text
    assert COUNTER.count_messages(view) <= 4000
    assert not pairing_problems(view)


def test_task_user_words_and_working_set_survive():
    history = long_session()
    view = turn_by_turn(history, 4000).view
    sent = json.dumps(view, ensure_ascii=False)
    assert view[1] == history[1]  # the task, as sent
    assert "Also keep the CHANGELOG in mind." in sent  # the user's own words
    # The newest failing tests and exception line (the working set), verbatim.
    failures = fixture("pytest_failures.txt")
    failed = [line for line in failures.split("\n") if line.startswith("FAILED ")]
    assert failed and all(line.split(" - ")[0] in sent for line in failed[:3])


def test_no_two_user_or_assistant_messages_in_a_row():
    history = long_session()
    view = turn_by_turn(history, 3000).view
    roles = [m["role"] for m in view]
    pairs = zip(roles, roles[1:], strict=False)
    assert not any(a == b and a in ("user", "assistant") for a, b in pairs)


def test_a_marker_with_nowhere_to_go_leads_the_task():
    # Only the task before the latest turn: the marker cannot lead an assistant message that
    # is not the latest one, nor stand alone between two assistant messages. The task is the
    # newest user message too, so the marker goes before its text, which stays last.
    history = [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": "task"},
        *[
            m
            for n in range(6)
            for m in (
                {"role": "assistant", "content": None, "tool_calls": [call(f"c{n}")]},
                {"role": "tool", "tool_call_id": f"c{n}", "content": log_lines(200)},
            )
        ],
    ]
    latest = COUNTER.count_messages(history[-2:])
    result = compile_view(
        history, plan(latest + 300, keep_first=0), COUNTER.count_message, lambda r: r + 3
    )
    view = result.view
    assert view[-2:] == history[-2:]
    assert view[1]["content"].startswith(MARKER) and view[1]["content"].endswith("\n\ntask")
    assert [m["role"] for m in view] == ["system", "user", "assistant", "tool"]


def test_the_forgotten_positions_are_kept_in_the_state():
    history = long_session()
    result = turn_by_turn(history, 4000)
    forgotten = {i for a, b in result.state.forgotten for i in range(a, b)}
    assert forgotten
    iters = iterations(history)
    assert all(history[i]["role"] in ("assistant", "tool") for i in forgotten)
    # Whole iterations only: a call never goes without its results.
    for i in forgotten:
        same = [j for j in range(len(history)) if iters[j] == iters[i]]
        assert set(same) <= forgotten
