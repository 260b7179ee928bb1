"""compile_request: the budget, the view the route sends, and the overflow error."""

from __future__ import annotations

import copy
import json
import math

import pytest

from proxy.compile.tokens import TokenCounter
from proxy.compile.view import Compiled, answer_limit, compile_request, message_budget
from proxy.errors import ContextLengthExceeded
from proxy.settings import CompactionSettings
from strategies.invariants import pairing_problems
from strategies.messages import canonical_json
from tests.unit.strategies.helpers import agent_history, fixture

COUNTER = TokenCounter()
SETTINGS = CompactionSettings()
TOOL = {"type": "function", "function": {"name": "run_command", "parameters": {"type": "object"}}}


def body(outputs, **extra):
    return {"model": "m", "messages": agent_history(outputs), **extra}


def compile_(b, window, settings=SETTINGS):
    return compile_request(b, window=window, settings=settings, counter=COUNTER)


@pytest.mark.parametrize(
    ("fields", "reserve"),
    [
        ({}, 1024),
        ({"max_tokens": 300}, 300),
        ({"max_completion_tokens": 200, "max_tokens": 300}, 200),
        ({"max_tokens": True}, 1024),
        ({"max_tokens": "9"}, 1024),
        ({"max_tokens": 32_000}, 1250),  # an eighth of the window, whatever was asked
        ({"max_completion_tokens": 32_000}, 1250),
    ],
)
def test_budget_formula(fields, reserve):
    assert message_budget(fields, 10_000, SETTINGS, 50) == 10_000 - reserve - 500 - 50


def test_reserve_never_leaves_the_prompt_a_negative_budget():
    # reserve_tokens (1024) is more than an eighth of a 1,500 window: at most half is kept.
    assert message_budget({"max_tokens": 32_000}, 1_500, SETTINGS, 0) == 1_500 - 750 - 75


def test_unknown_window_forwards_unchanged():
    b = body([fixture("seed_demo.txt")] * 20)
    result = compile_(b, None)
    assert result.messages == b["messages"] and result.messages is not b["messages"]
    assert result.budget is None and result.window is None and result.events == []
    assert result.summary() == "none"
    assert result.tokens_compiled == result.tokens_original


def test_fitting_history_is_untouched():
    b = body(["ok"] * 5, tools=[TOOL])
    result = compile_(b, 32_000)
    assert result.messages == b["messages"] and result.summary() == "none"
    assert result.tokens_original == COUNTER.count_messages(b["messages"]) + COUNTER.count_tools(
        [TOOL]
    )


def test_over_budget_history_is_compacted_with_events():
    b = body([fixture("seed_demo.txt"), fixture("pytest_failures.txt")] * 10, tools=[TOOL])
    frozen = copy.deepcopy(b)
    result = compile_(b, 24_000)
    assert b == frozen
    assert result.tokens_compiled < result.tokens_original
    assert result.tokens_compiled - COUNTER.count_tools([TOOL]) <= result.budget
    assert "traceback" in result.summary()
    assert all(e.strategy in ("traceback", "tiered", "forget") for e in result.events)
    assert not pairing_problems(result.messages)
    assert result.messages[-2:] == b["messages"][-2:]


def test_seed_demo_through_the_compiler():
    seed = fixture("seed_demo.txt")
    b = body([seed, "ok", "ok", "ok"])
    budget = COUNTER.count_messages(b["messages"]) / 1.3  # over the budget: the pipeline fires
    result = compile_(b, math.ceil((budget + 1024) / 0.95))
    assert [e.label for e in result.events] == ["traceback"] and not result.events[0].replayed
    # The next turn starts from the stored decisions: the pass is carried, nothing fires.
    b2 = {**b, "messages": b["messages"] + agent_history(["ok"])[2:]}
    again = compile_request(
        b2, window=result.window, settings=SETTINGS, counter=COUNTER, prior=result.state
    )
    assert [e.label for e in again.events] == ["traceback"] and again.events[0].replayed
    assert again.summary() == "none" and again.messages[:-2] == result.messages
    out = result.messages[3]["content"]
    assert "AttributeError: 'Config' object has no attribute 'database_url'" in out
    assert 'return {"url": cfg.database_url}' in out
    # Elided to its evidence, then the room the headroom leaves filled back with its lines.
    assert len(out) < 0.6 * len(seed) and "ctxproxy_recall original: /messages/" in out
    assert result.tokens_compiled <= result.budget


def test_hopeless_request_raises_with_figures():
    b = body(["ok"], tools=[TOOL])
    b["messages"][0] = {"role": "system", "content": "x " * 100_000}  # only the client can cut
    with pytest.raises(ContextLengthExceeded) as info:
        compile_(b, 8_192)
    exc = info.value
    assert exc.window == 8_192 and exc.needed > exc.budget
    assert exc.budget == 8_192 - 1024 - math.ceil(0.05 * 8_192)
    error = exc.body()["error"]
    assert error["code"] == "context_length_exceeded"
    # The system prompt is the fixed part: named as such, not as one message to shorten.
    assert "fixed part alone does not fit" in error["message"]
    assert "messages[0]" not in error["message"]
    tools = COUNTER.count_tools([TOOL])
    assert f"tool definitions ({tools} tokens)" in error["message"]
    assert f"leaves {exc.budget} for the prompt (1024 kept for the answer" in error["message"]
    assert "-" not in "".join(c for c in error["message"] if not c.isalpha())


def test_a_huge_latest_user_message_is_cut_to_its_ends_rather_than_refused():
    b = body(["ok"], tools=[TOOL])
    b["messages"].append({"role": "user", "content": "x " * 60_000 + "y " * 40_000})
    out = compile_(b, 8_192)
    latest = out.messages[-1]["content"]
    assert latest.startswith("x x") and latest.endswith("y ") and "chars cut" in latest
    assert out.messages[:-1] == b["messages"][:-1]
    used = out.tokens_compiled - COUNTER.count_tools([TOOL])
    # The room is used, not a few lines: all but the headroom a continuing session keeps free.
    assert 0.7 * out.budget - 320 <= used <= out.budget


def test_deterministic_bytes():
    b = body([fixture("pytest_failures.txt")] * 8)
    a = compile_(b, 16_000)
    c = compile_request(b, window=16_000, settings=SETTINGS, counter=TokenCounter())
    assert canonical_json(a.messages) == canonical_json(c.messages)
    assert a.events == c.events


def test_summary_lists_passes_in_order_once():
    from strategies.events import CompactionEvent

    ev = [
        CompactionEvent("traceback", None, [1], 10, 5, 9, "r"),
        CompactionEvent("tiered", 1, [1], 5, 4, 1, "r"),
        CompactionEvent("tiered", 2, [2], 4, 3, 1, "r"),
        CompactionEvent("tiered", 1, [3], 3, 2, 1, "r"),
    ]
    assert Compiled([], 0, 0, 1, 1, ev).summary() == "traceback,tiered:1,tiered:2"


def test_unknown_strategy_in_pipeline_fails_clearly():
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="unknown strategy 'nope'"):
        CompactionSettings(pipeline=["nope"])  # refused when the config loads, not per request


def test_events_serialise_to_json():
    b = body([fixture("seed_demo.txt")] * 12)
    result = compile_(b, 16_000)
    assert result.events
    json.dumps([e.to_dict() for e in result.events])


def test_huge_latest_tool_output_is_elided_to_its_evidence_not_refused() -> None:
    from proxy.compile.tokens import TokenCounter
    from proxy.settings import CompactionSettings

    log = "\n".join(
        f"INFO worker {i}: connected to db pool {i % 9} in {i % 37} ms" for i in range(3000)
    )
    log += (
        '\nTraceback (most recent call last):\n  File "/app/main.py", line 9, in run\n'
        "    cfg.database_url\nAttributeError: 'Config' object has no attribute 'x'"
    )
    body = {
        "model": "m",
        "messages": [
            {"role": "system", "content": "sys"},
            {"role": "user", "content": "run the tests"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {"id": "c1", "type": "function", "function": {"name": "sh", "arguments": "{}"}}
                ],
            },
            {"role": "tool", "tool_call_id": "c1", "content": log},
        ],
    }
    out = compile_request(body, window=4096, settings=CompactionSettings(), counter=TokenCounter())
    latest = out.messages[-1]
    assert latest["tool_call_id"] == "c1"
    assert "AttributeError: 'Config' object has no attribute 'x'" in latest["content"]
    # Cut to fit the room (strategies/cut.py): head, tail, evidence, the original's ref.
    assert latest["content"].startswith("[Output of tool 'sh' cut to fit the context window")
    assert "INFO worker 0: connected" in latest["content"]
    assert out.budget is not None and out.tokens_compiled < 4096
    assert out.messages[:3] == body["messages"][:3]
    # A system prompt alone over the window cannot be elided: that is the client's to shorten.
    too_big = {"model": "m", "messages": [{"role": "system", "content": "word " * 8000}]}
    with pytest.raises(ContextLengthExceeded):
        compile_request(too_big, window=4096, settings=CompactionSettings(), counter=TokenCounter())


def test_summary_names_only_what_fired_for_this_request():
    from strategies.events import CompactionEvent

    carried = CompactionEvent("tiered", 1, [1], 10, 5, 9, "r; carried", replayed=True)
    fresh = CompactionEvent("sliding_window", None, [2], 10, 5, 9, "r")
    assert Compiled([], 0, 0, 1, 1, [carried]).summary() == "none"
    assert Compiled([], 0, 0, 1, 1, [carried, fresh]).summary() == "sliding_window"


def qwen_shaped(system_tokens: int = 6_500) -> dict:
    """Like Qwen Code 0.24.4's first request: a system prompt (~6.5k tokens), 14 tools (~2.4k),
    text-part lists, and max_tokens 32,000 for a model it does not know."""
    tools = [
        {
            "type": "function",
            "function": {
                "name": f"tool_{i}",
                "description": "word " * 135,
                "parameters": {"type": "object", "properties": {"path": {"type": "string"}}},
            },
        }
        for i in range(14)
    ]
    part = [{"type": "text", "text": "Fix the failing test in calc.py."}]
    system = {"role": "system", "content": "rule of the house. " * (system_tokens // 5)}
    messages = [system, {"role": "user", "content": part}]
    return {"model": "m", "messages": messages, "tools": tools, "max_tokens": 32_000}


def test_an_agent_asking_32000_of_a_32k_window_gets_an_answer_that_fits():
    b = qwen_shaped()
    out = compile_(b, 32_768)
    assert out.reserve == 32_768 // 8 and out.tokens_compiled <= out.prompt_budget
    limit = answer_limit(b, out, SETTINGS)
    # What is forwarded fits beside the prompt; more than the reserve, as the room allows.
    assert out.reserve < limit <= 32_768 - math.ceil(0.05 * 32_768) - out.tokens_compiled
    assert answer_limit({**b, "max_tokens": 500}, out, SETTINGS) is None  # fits: unchanged


def test_a_fixed_part_larger_than_a_16k_window_allows_is_refused_naming_it():
    b = qwen_shaped(13_000)  # ~15.4k fixed, as Qwen Code's was in a larger repo
    with pytest.raises(ContextLengthExceeded) as info:
        compile_(b, 16_384)
    exc = info.value
    message = exc.body()["error"]["message"]
    assert exc.fixed is not None and exc.fixed > exc.budget > 0
    assert f"take {exc.fixed} tokens" in message and "fixed part" in message
    assert (
        "context window of 16384 tokens leaves" in message and "2048 kept for the answer" in message
    )
    assert "messages[" not in message


def test_a_conversation_over_the_room_names_its_largest_message():
    exc = ContextLengthExceeded(9_000, 7_000, 8_192, (3, "tool", 5_000), prompts=900, tools=100)
    message = exc.message
    assert "needs 9000 tokens" in message and "2000 more than fit" in message
    assert "takes 1000, leaving 6000 for the conversation" in message
    assert "messages[3] (tool, 5000 tokens" in message


def test_budget_and_compiled_are_on_one_basis():
    b = body([fixture("seed_demo.txt")] * 20, tools=[TOOL] * 5)
    out = compile_(b, 8_192)
    tools = out.tools
    assert tools > 0 and out.prompt_budget == out.budget + tools
    assert out.prompt_budget == 8_192 - 1024 - math.ceil(0.05 * 8_192)
    assert out.tokens_compiled <= out.prompt_budget
