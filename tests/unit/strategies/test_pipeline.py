"""The pipeline on top of stored decisions: rare firing, sticky forms, same input same bytes."""

from __future__ import annotations

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from strategies.context import OverBudget
from strategies.messages import canonical_json
from strategies.options import ForgetOptions, TieredOptions, TracebackOptions
from strategies.pipeline import Plan, compile_view, request_points
from tests.unit.strategies.helpers import COUNTER, agent_history, fixture, log_lines

OUTPUTS = [
    fixture("seed_demo.txt"),
    fixture("pytest_failures.txt"),
    log_lines(120),
    "ok",
    "3 files changed",
]
DEFAULT = ("traceback", "tiered", "forget")


def plan(budget: int, pipeline=DEFAULT, trigger: float = 1.0, target: float = 0.5) -> Plan:
    return Plan(
        pipeline,
        budget,
        target=int(target * budget),
        trigger=int(trigger * budget),
        options={
            "tiered": TieredOptions(keep_recent=2),
            "traceback": TracebackOptions(min_chars=2000),
            "forget": ForgetOptions(keep_recent=2),
        },
    )


def run(messages, p, prior=None, correction: float = 1.0):
    return compile_view(
        messages, p, COUNTER.count_message, lambda raw: round((raw + 3) * correction), prior=prior
    )


def session(turns: int, seed: int = 7):
    rnd = random.Random(seed)
    return agent_history([rnd.choice(OUTPUTS) for _ in range(turns)])


def turn_by_turn(history, p, **kw):
    """Each request point in order, every turn starting from the previous turn's state."""
    prior, out = None, []
    for end in request_points(history)[1:]:
        result = run(history[:end], p, prior, **kw)
        out.append(result)
        prior = result.state
    return out


def test_request_points_are_before_each_reply():
    history = agent_history(["a", "b"])
    assert request_points(history) == [2, 4, 6]
    assert request_points([]) == [0]


def test_a_turn_that_does_not_fire_only_appends_to_what_was_sent():
    results = turn_by_turn(session(80), plan(40_000))
    fired = 0
    for before, now in zip(results, results[1:], strict=False):
        fresh = [e for e in now.events if not e.replayed]
        if not fresh:
            sent = [canonical_json(m) for m in before.view]
            assert [canonical_json(m) for m in now.view[: len(sent)]] == sent
        fired += bool(fresh)
    assert 0 < fired < len(results) / 3  # rare, large steps


def test_a_firing_leaves_room_for_several_turns():
    """A light step (newest old outputs folded) frees at least a quarter of the budget; a full
    one goes down to the target. Either way the next turns only append."""
    p = plan(40_000)
    fired = [r for r in turn_by_turn(session(60), p) if any(not e.replayed for e in r.events)]
    assert fired
    for r in fired:
        assert r.state.view_tokens + 3 <= 0.75 * p.budget


def test_same_input_same_bytes_and_a_resend_keeps_its_view():
    history = session(40)
    p = plan(9_000)
    first = turn_by_turn(history, p)[-1]
    again = turn_by_turn(history, p)[-1]
    assert canonical_json(first.view) == canonical_json(again.view)
    # Resent with a calibration that moved since: the stored view still fits, so it goes out
    # byte for byte as before.
    resent = run(history, p, first.state, correction=1.1)
    assert canonical_json(resent.view) == canonical_json(first.view)
    assert not [e for e in resent.events if not e.replayed]


def test_calibration_never_rewrites_what_was_sent():
    history = session(50, seed=11)
    p = plan(10_000)
    prior, previous = None, None
    for i, end in enumerate(request_points(history)[1:]):
        result = run(history[:end], p, prior, correction=1.0 + 0.15 * (i % 2))
        if previous is not None and not [e for e in result.events if not e.replayed]:
            assert result.view[: len(previous)] == previous
        prior, previous = result.state, result.view


def test_hopeless_history_raises_over_budget_naming_the_largest_message():
    history = agent_history(["x"] * 3, system=log_lines(2000))
    with pytest.raises(OverBudget) as info:
        run(history, plan(2_000))
    assert info.value.needed > 2_000 and info.value.budget == 2_000
    assert info.value.largest[:2] == (0, "system")


def test_latest_tool_output_elided_to_evidence_as_last_resort():
    history = agent_history(["x"] * 3 + [log_lines(2000) + "\nValueError: the real cause"])
    view = run(history, plan(2_000)).view
    assert view[-1]["tool_call_id"] == history[-1]["tool_call_id"]
    assert view[-1]["content"].startswith("[Output of tool ")
    assert view[-1]["content"].endswith("ValueError: the real cause")
    assert COUNTER.count_messages(view) <= 2_000


def test_the_latest_output_is_not_cut_while_older_steps_can_go():
    history = agent_history([log_lines(300)] * 6 + [log_lines(900) + "\nKeyError: 'x'"])
    latest = COUNTER.count_message(history[-1])
    view = run(history, plan(latest + 600)).view
    assert view[-1] == history[-1]  # older iterations were forgotten instead


def test_keep_window_yields_when_recent_outputs_alone_overflow():
    history = agent_history([log_lines(400)] * 4 + ["done"])
    budget = COUNTER.count_messages(history[-6:]) // 2
    view = run(history, plan(budget)).view
    assert view[-2:] == history[-2:]
    assert COUNTER.count_messages(view) <= budget


def test_a_cut_latest_user_message_uses_the_room_left():
    """A paste far over a small budget keeps as much of its head as fits, not a few lines."""
    paste = "\n".join(
        f"line {i}: the service retried after a cache warning {i * 7}" for i in range(300)
    )
    history = [
        {"role": "system", "content": "You are helpful."},
        {"role": "user", "content": "Fix the bug."},
        {"role": "assistant", "content": "Which log?"},
        {"role": "user", "content": "Here:\n" + paste},
    ]
    p = plan(900)
    result = run(history, p)
    latest = result.view[-1]["content"]
    used = sum(COUNTER.count_message(m) for m in result.view) + 3
    assert used <= 900 and used >= 900 - 40  # the room is used, within a line's worth
    assert latest.startswith("Here:\nline 0:") and latest.endswith(paste[-20:])


@given(
    st.integers(0, 50_000),
    st.floats(0.01, 1.0),
    st.floats(0.01, 1.0),
    st.integers(0, 2_000),
    st.integers(0, 60_000),
)
def test_the_trigger_never_falls_as_the_fixed_part_grows(budget, trigger, target, excerpt, fixed):
    # compile_view places the fixed part only when a view passes the trigger placed at none
    plan = Plan(["tiered"], budget, int(target * budget), int(trigger * budget), excerpt=excerpt)
    assert plan.within(fixed).trigger >= plan.within(0).trigger
    assert plan.within(fixed + 1).trigger >= plan.within(fixed).trigger
