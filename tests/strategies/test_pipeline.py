"""The pipeline replays the session: compaction is rare, and old messages stay byte-stable."""

from __future__ import annotations

import random

import pytest

from strategies.base import OverBudget, canonical_json, content_key
from strategies.pipeline import Plan, compile_view, request_points
from strategies.replay import ReplayCache
from tests.strategies.helpers import COUNTER, agent_history, fixture, log_lines

OUTPUTS = [
    fixture("seed_demo.txt"),
    fixture("pytest_failures.txt"),
    log_lines(120),
    "ok",
    "3 files changed",
]


def plan(budget: int, pipeline=("traceback", "tiered")) -> Plan:
    return Plan(
        pipeline,
        budget,
        target=budget // 2,
        trigger=int(0.6 * budget),
        options={"tiered": {"keep_recent": 2}, "traceback": {"min_chars": 2000}},
    )


def run(messages, p):
    return compile_view(messages, p, COUNTER.count_message, lambda raw: raw + 3)


def session(turns: int, seed: int = 7):
    rnd = random.Random(seed)
    return agent_history([rnd.choice(OUTPUTS) for _ in range(turns)])


def test_request_points_are_before_each_reply():
    history = agent_history(["a", "b"])
    assert request_points(history) == [2, 4, 6]
    assert request_points([]) == [0]


def test_view_of_the_next_turn_extends_the_previous_unless_a_compaction_fires():
    history = session(60)
    p = plan(30_000)
    previous, fired_turns = None, 0
    for end in request_points(history)[1:]:
        view, events = run(history[:end], p)
        fresh = [e for e in events if "replayed" not in e.reason]
        if previous is not None and not fresh:
            assert [canonical_json(m) for m in view[: len(previous)]] == [
                canonical_json(m) for m in previous
            ]
        fired_turns += bool(fresh)
        previous = view
    assert 0 < fired_turns < 30  # hysteresis: most turns append without recompaction


def test_compaction_lands_at_or_below_the_trigger():
    history = session(40)
    p = plan(12_000)
    view, events = run(history, p)
    assert events
    assert COUNTER.count_messages(view) <= p.budget


def test_same_input_same_bytes():
    history = session(30)
    a, ea = run(history, plan(9_000))
    b, eb = run(history, plan(9_000))
    assert canonical_json(a) == canonical_json(b) and ea == eb


def test_hopeless_history_raises_over_budget_with_the_smallest_size():
    history = agent_history(["x"] * 3)
    history.append({"role": "user", "content": log_lines(2000)})  # the latest turn: untouchable
    with pytest.raises(OverBudget) as info:
        run(history, plan(2_000))
    assert info.value.needed > 2_000 and info.value.budget == 2_000


def test_latest_tool_output_elided_to_evidence_as_last_resort():
    history = agent_history(["x"] * 3 + [log_lines(2000) + "\nValueError: the real cause"])
    view, events = run(history, plan(2_000))
    assert view[-1]["tool_call_id"] == history[-1]["tool_call_id"]
    assert view[-1]["content"].startswith("[Output of tool ")
    assert view[-1]["content"].endswith("ValueError: the real cause")
    assert COUNTER.count_messages(view) <= 2_000


def test_keep_window_yields_when_recent_outputs_alone_overflow():
    history = agent_history([log_lines(400)] * 4 + ["done"])
    view, events = run(history, plan(COUNTER.count_messages(history[-6:]) // 2))
    assert view[-2:] == history[-2:]
    assert COUNTER.count_messages(view) <= COUNTER.count_messages(history[-6:]) // 2


def test_resuming_from_the_previous_turn_equals_a_full_replay():
    history = session(40, seed=3)
    p = plan(20_000)
    keys = [content_key(m) for m in history]
    cache = ReplayCache()

    def cached(n):
        return compile_view(
            history[:n],
            p,
            COUNTER.count_message,
            lambda raw: raw + 3,
            hashes=keys[:n],
            cache_key="test",
            cache=cache,
        )

    for end in request_points(history)[1:]:
        resumed, resumed_events = cached(end)
        full, full_events = run(history[:end], p)
        assert canonical_json(resumed) == canonical_json(full)
        assert resumed_events == full_events
    assert len(cache._states) > 1
