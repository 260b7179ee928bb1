"""The final gate: compaction never adds a pairing problem, nor moves prompts or the last turn."""

from __future__ import annotations

import pytest

from strategies.context import InvariantError, OverBudget
from strategies.invariants import check, check_valid, pairing_problems
from tests.unit.strategies.helpers import agent_history, call


def parallel_turn():
    return [
        {"role": "assistant", "content": None, "tool_calls": [call("a"), call("b")]},
        {"role": "tool", "tool_call_id": "b", "content": "B"},
        {"role": "tool", "tool_call_id": "a", "content": "A"},
    ]


def test_valid_history_with_parallel_calls_has_no_problems():
    history = agent_history(["x", "y"]) + parallel_turn()
    assert not pairing_problems(history)


@pytest.mark.parametrize(
    ("mutate", "problem"),
    [
        (lambda h: h.pop(3), "tool call 'call_0' unanswered"),
        (lambda h: h.pop(2), "tool message 'call_0' answers no call"),
        (lambda h: h[3].pop("tool_call_id"), "tool message None answers no call"),
        (lambda h: h.insert(3, {"role": "user", "content": "hi"}), "tool call 'call_0' unanswered"),
    ],
)
def test_pairing_problems_are_named(mutate, problem):
    history = agent_history(["x", "y"])
    mutate(history)
    assert problem in pairing_problems(history)


def test_gate_rejects_a_problem_that_compaction_added():
    history = agent_history(["x", "y", "z"])
    broken = history[:3] + history[4:]
    with pytest.raises(InvariantError, match="pairing"):
        check_valid(history, broken)


def test_gate_leaves_a_clients_own_invalid_history_alone():
    history = agent_history(["x", "y", "z"])
    del history[3]  # the client's own orphaned call
    check_valid(history, list(history))


def test_gate_rejects_a_changed_latest_turn_or_prompt():
    history = agent_history(["x", "y"])
    changed = [*history[:-1], {**history[-1], "content": "other"}]
    with pytest.raises(InvariantError, match="latest turn"):
        check_valid(history, changed)
    with pytest.raises(InvariantError, match="system"):
        check_valid(history, history[1:])


def test_gate_raises_over_budget_with_figures():
    history = agent_history(["x"])
    with pytest.raises(OverBudget) as info:
        check(history, history, budget=10, usage=25)
    assert (info.value.needed, info.value.budget) == (25, 10)


def test_a_marker_may_lead_a_latest_user_paste_folded_to_its_evidence() -> None:
    """A long session whose newest user message is a pasted CI log: forgetting leads it with
    the marker (the question stays last), and a deep step folds the paste to its evidence."""
    from strategies.compact import MARKER

    paste = "Here is last night's CI log:\n" + "\n".join(f"line {i}" for i in range(300))
    original = [
        {"role": "user", "content": "Fix the tests."},
        {"role": "assistant", "content": "On it."},
        {"role": "user", "content": paste},
    ]
    marker = f"{MARKER} 1 earlier message was omitted.]\n\nWork done: ran pytest."
    folded = "[User message folded to its evidence]\nE   ValueError: unsupported currency"
    led = {"role": "user", "content": f"{marker}\n\n{folded}"}
    check_valid(original, [original[0], original[1], led])
    # The marker with any other text in place of the user's is still a changed message.
    changed = {"role": "user", "content": f"{marker}\n\nSomething the user never wrote."}
    with pytest.raises(InvariantError, match="changed the latest"):
        check_valid(original, [original[0], original[1], changed])
