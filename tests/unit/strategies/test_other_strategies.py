"""fold, sliding_window and none."""

from __future__ import annotations

from strategies import STRATEGIES
from strategies.context import Context
from strategies.fold import fold
from strategies.invariants import pairing_problems
from strategies.none import none
from strategies.options import SlidingWindowOptions
from strategies.registry import get, register, unregister
from strategies.sliding_window import sliding_window
from tests.unit.strategies.helpers import agent_history, ctx, fixture, log_lines, usage

OUT = log_lines(200)


def test_fold_makes_byte_stable_placeholders():
    history = agent_history([OUT] * 6)
    for m in history[2::2]:
        m["content"] = "I think the worker batches are processed out of order; checking. " * 3
    a, events = fold(history, ctx(history, budget=usage(history) // 6))
    b, _ = fold(history, ctx(history, budget=usage(history) // 6))
    assert a == b
    assert events[0].strategy == "fold" and events[0].phase is None
    tools = [m for m in a[:-4] if m.get("role") == "tool"]
    assert all(m["content"].startswith("[Output of tool 'run_command' folded: ") for m in tools)
    thoughts = [m for m in a[2:-4] if m.get("role") == "assistant"]
    assert all(m["content"].startswith("[Assistant text folded: ") for m in thoughts)
    assert all(
        m["tool_calls"] == h["tool_calls"] for m, h in zip(thoughts, history[2:-4:2], strict=True)
    )


def test_fold_leaves_short_outputs_and_plain_answers():
    history = agent_history(["ok"] * 4)
    history.insert(2, {"role": "assistant", "content": "Here is my plan. " * 50})
    history.insert(3, {"role": "user", "content": "go on"})
    out, events = fold(history, ctx(history, budget=10))
    assert out[2] == history[2]  # a plain answer without calls
    assert all(m["content"] == "ok" for m in out if m.get("role") == "tool")


def test_sliding_window_drops_whole_iterations_and_keeps_the_task():
    history = agent_history([OUT] * 8)
    out, events = sliding_window(history, ctx(history, budget=usage(history) // 3))
    assert out[:2] == history[:2]  # system prompt and the task
    assert out[-4:] == history[-4:]
    assert not pairing_problems(out)
    assert events[0].strategy == "sliding_window"
    assert events[0].iterations == list(range(1, 1 + len(events[0].iterations)))
    assert len(out) == len(history) - 2 * len(events[0].iterations)


def test_sliding_window_keeps_the_latest_user_message():
    history = agent_history([OUT] * 3)
    history.append({"role": "user", "content": "now also fix the docs"})
    history += agent_history([OUT] * 3)[2:]
    only_latest = SlidingWindowOptions(keep_recent=0)
    out, _ = sliding_window(history, ctx(history, budget=10, options=only_latest))
    assert {"role": "user", "content": "now also fix the docs"} in out
    assert not pairing_problems(out)


def test_none_changes_nothing():
    history = agent_history([OUT] * 3)
    out, events = none(history, ctx(history, budget=1))
    assert out == history and out is not history and events == []


def test_registry_registers_and_unregisters_a_fake():
    @register("fake")
    def fake(messages, c: Context):
        return list(messages), []

    try:
        assert get("fake") is fake
    finally:
        unregister("fake")
    assert "fake" not in STRATEGIES
    assert {"traceback", "fold", "tiered", "sliding_window", "none"} <= set(STRATEGIES)


def test_unknown_strategy_names_the_known_ones():
    try:
        get("nope")
    except KeyError as exc:
        assert "tiered" in str(exc)
    else:
        raise AssertionError("expected KeyError")


def test_fixture_outputs_fold_too():
    history = agent_history([fixture("pytest_failures.txt")] * 4)
    out, events = fold(history, ctx(history, budget=usage(history) // 4))
    assert events and not pairing_problems(out)
