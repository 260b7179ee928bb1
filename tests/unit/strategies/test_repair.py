"""Repairing a client's own broken tool-call pairing: orphans dropped, missing results stood in."""

from __future__ import annotations

import copy

from hypothesis import given
from hypothesis import strategies as st

from strategies.invariants import pairing_faults, pairing_problems
from strategies.repair import placeholder_result, repair_pairing
from tests.unit.strategies.helpers import agent_history, call


def test_valid_history_comes_back_equal():
    history = agent_history(["x", "y"])
    assert repair_pairing(history) == history


def test_orphan_tool_message_is_dropped():
    history = agent_history(["x"])
    stray = {"role": "tool", "tool_call_id": "nobody", "content": "?"}
    broken = [*history[:2], stray, *history[2:]]
    assert repair_pairing(broken) == history


def test_unanswered_calls_get_placeholders_after_the_results_that_came():
    ask = {"role": "assistant", "content": None, "tool_calls": [call("a"), call("b"), call("c")]}
    got_b = {"role": "tool", "tool_call_id": "b", "content": "B"}
    user = {"role": "user", "content": "and?"}
    repaired = repair_pairing([ask, got_b, user])
    assert repaired == [ask, got_b, placeholder_result("a"), placeholder_result("c"), user]
    assert repair_pairing([ask]) == [ask, *map(placeholder_result, "abc")]


def test_a_result_separated_from_its_call_is_an_orphan_and_the_call_gets_a_placeholder():
    ask = {"role": "assistant", "content": None, "tool_calls": [call("a")]}
    late = {"role": "tool", "tool_call_id": "a", "content": "A"}
    user = {"role": "user", "content": "hi"}
    assert pairing_faults([ask, user, late])[0].index == 0
    assert repair_pairing([ask, user, late]) == [ask, placeholder_result("a"), user]


ids = st.sampled_from(["a", "b", "c"])
message = st.one_of(
    st.builds(lambda t: {"role": "user", "content": t}, st.text(max_size=3)),
    st.builds(
        lambda cs: {"role": "assistant", "content": None, "tool_calls": [call(c) for c in cs]},
        st.lists(ids, min_size=1, max_size=3),
    ),
    st.builds(lambda i: {"role": "tool", "tool_call_id": i, "content": "out"}, ids),
    st.just({"role": "assistant", "content": "text"}),
)


@given(st.lists(message, max_size=12))
def test_any_history_repaired_is_valid_and_keeps_all_but_orphans(history):
    before = copy.deepcopy(history)
    repaired = repair_pairing(history)
    assert history == before  # never mutated
    assert not pairing_problems(repaired)
    orphans = {f.index for f in pairing_faults(history) if f.kind == "orphan_result"}
    kept = [m for i, m in enumerate(history) if i not in orphans]
    added = [m for m in repaired if str(m.get("content")).startswith("[No result")]
    assert [m for m in repaired if m not in added] == kept
    assert repair_pairing(repaired) == repaired
