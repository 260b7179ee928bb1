"""Items converted once (proxy/formats/seen.py): what a resend gets is what a first send got,
never an object another request holds, and a bad item is refused every time."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from proxy.errors import BadRequest
from proxy.formats import anthropic, responses
from proxy.formats.seen import OVERHEAD, Seen
from strategies.budget import CacheBudget


def test_a_resent_item_is_converted_once_and_each_gets_its_own_message() -> None:
    seen, made = Seen("test"), []

    def make(item: Any) -> list[dict[str, Any]]:
        made.append(item)
        return [{"role": "user", "content": item["text"]}]

    first = seen.convert({"text": "hello"}, make)
    again = seen.convert({"text": "hello"}, make)
    twice = seen.convert({"text": "hello"}, make)
    assert len(made) == 1
    assert first == again == twice
    assert again[0] is not twice[0] and again[0] is not first[0]
    first[0]["content"] = "changed by its request"
    again[0]["extra"] = 1
    assert seen.convert({"text": "hello"}, make) == [{"role": "user", "content": "hello"}]


def test_equal_bytes_only_key_order_and_types_count() -> None:
    seen, made = Seen("test"), []

    def make(item: Any) -> list[dict[str, Any]]:
        made.append(item)
        return [{"n": repr(item)}]

    for item in ({"a": 1, "b": 2}, {"b": 2, "a": 1}, {"a": 1.0, "b": 2}, {"a": True, "b": 2}):
        assert seen.convert(item, make) == [{"n": repr(item)}]
    assert len(made) == 4


def test_a_refused_item_is_refused_again_and_odd_items_are_converted_uncached() -> None:
    seen, calls = Seen("test"), []

    def make(item: Any) -> list[dict[str, Any]]:
        calls.append(item)
        if item.get("bad"):
            raise BadRequest("bad item")
        return [{"ok": True}]

    for _ in range(2):
        with pytest.raises(BadRequest):
            seen.convert({"bad": True}, make)
    huge = {"n": 2**70}  # orjson cannot write it: converted every time, never cached
    assert seen.convert(huge, make) == seen.convert(huge, make) == [{"ok": True}]
    assert len(calls) == 4


def test_bounded_by_bytes() -> None:
    budget = CacheBudget(40 * (2 * 111 + OVERHEAD))
    seen = Seen("test", budget)
    for i in range(200):
        seen.convert({"text": f"{i:0100d}"}, lambda item: [{"content": item["text"]}])
    assert 0 < len(seen._held) <= 40 and budget.used <= budget.max_bytes


def claude_turn(steps: int) -> dict[str, Any]:
    messages: list[dict[str, Any]] = [{"role": "user", "content": "Fix the failing test."}]
    for i in range(steps):
        call = {"type": "tool_use", "id": f"t{i}", "name": "Bash", "input": {"cmd": f"ls {i}"}}
        messages.append({"role": "assistant", "content": [{"type": "text", "text": "Look."}, call]})
        result = {"type": "tool_result", "tool_use_id": f"t{i}", "content": f"out {i}"}
        messages.append({"role": "user", "content": [result]})
    return {"model": "m", "max_tokens": 100, "system": "Be brief.", "messages": messages}


def test_anthropic_conversion_is_the_same_with_and_without_the_cache() -> None:
    anthropic.SEEN.clear()
    body = claude_turn(4)
    cold = copy.deepcopy(anthropic.to_neutral(copy.deepcopy(body)).body)
    warm = anthropic.to_neutral(copy.deepcopy(body)).body
    assert cold == warm
    warm["messages"][2]["content"] = "changed"  # one request's change …
    assert anthropic.to_neutral(copy.deepcopy(body)).body == cold  # … is not the next one's


def test_anthropic_a_bad_message_is_refused_even_after_a_good_one_like_it() -> None:
    body = claude_turn(1)
    anthropic.to_neutral(body)
    bad = copy.deepcopy(body)
    bad["messages"][1]["content"][1]["input"] = "not an object"
    with pytest.raises(BadRequest, match=r"messages\.1\.content\.1\.input"):
        anthropic.to_neutral(bad)


def codex_turn(calls: int) -> dict[str, Any]:
    items: list[dict[str, Any]] = [{"type": "message", "role": "user", "content": "Fix it."}]
    for i in range(calls):  # the first call opens an assistant message, the others join it
        items.append({"type": "function_call", "call_id": f"c{i}", "name": "sh", "arguments": "{}"})
    items += [
        {"type": "function_call_output", "call_id": f"c{i}", "output": "ok"} for i in range(calls)
    ]
    return {"model": "m", "input": items}


def test_responses_joined_calls_leave_the_cached_messages_alone() -> None:
    responses.SEEN.clear()
    body = codex_turn(3)
    cold = copy.deepcopy(responses.to_neutral(copy.deepcopy(body)).body["messages"])
    assert [len(m.get("tool_calls", [])) for m in cold] == [0, 3, 0, 0, 0]
    for _ in range(3):  # were a cached list appended to, the calls would pile up
        warm = responses.to_neutral(copy.deepcopy(body)).body["messages"]
        assert warm == cold


def fresh(convert: Any, body: dict[str, Any]) -> list[dict[str, Any]]:
    """What a process that never saw anything makes of `body`."""
    for seen in (anthropic.SEEN, anthropic.FIXED, responses.SEEN, responses.FIXED):
        seen.clear()
    return copy.deepcopy(convert(copy.deepcopy(body)).body["messages"])


def test_a_history_grown_edited_or_retyped_converts_as_a_fresh_one_would() -> None:
    body = claude_turn(3)
    grown = claude_turn(5)
    edited = copy.deepcopy(grown)
    edited["messages"][2]["content"][0]["content"] = "another output"  # an early item changed
    ones, retyped = copy.deepcopy(grown), copy.deepcopy(grown)
    ones["messages"][1]["content"][1]["input"] = {"cmd": 1}
    retyped["messages"][1]["content"][1]["input"] = {"cmd": 1.0}  # equal in Python, not in JSON
    retried = copy.deepcopy(grown)
    retried["messages"][-1]["content"][0]["content"] = "the retry's output"
    bodies = (body, grown, edited, ones, retyped, retried)
    expected = [fresh(anthropic.to_neutral, b) for b in bodies]
    for _ in range(2):  # after a first pass every list and item is known
        for b, want in zip(bodies, expected, strict=True):
            assert anthropic.to_neutral(copy.deepcopy(b)).body["messages"] == want
    assert [expected[i][2]["tool_calls"][0]["function"]["arguments"] for i in (3, 4)] == [
        '{"cmd": 1}',
        '{"cmd": 1.0}',
    ]


def test_a_bad_item_after_a_known_history_is_refused_by_its_place() -> None:
    body = codex_turn(2)
    responses.to_neutral(copy.deepcopy(body))
    bad = copy.deepcopy(body)
    bad["input"].append({"type": "function_call_output", "call_id": 7, "output": "ok"})
    for _ in range(2):
        with pytest.raises(BadRequest, match=r"input\.5\.call_id"):
            responses.to_neutral(copy.deepcopy(bad))
    assert responses.to_neutral(copy.deepcopy(body)).body["messages"] == fresh(
        responses.to_neutral, body
    )


def claude_agent_turn(steps: int, system: str = "You are a coding agent. " * 4000) -> dict:
    tools = [
        {"name": f"Tool{i}", "description": f"tool {i}", "input_schema": {"type": "object"}}
        for i in range(4)
    ]
    return {**claude_turn(steps), "system": [{"type": "text", "text": system}], "tools": tools}


def test_unseen_counts_what_no_earlier_request_sent() -> None:
    anthropic.SEEN.clear()
    anthropic.FIXED.clear()
    first = anthropic.to_neutral(copy.deepcopy(claude_agent_turn(3)))
    assert first.unseen is not None and first.unseen > 96_000  # the system prompt is new
    again = anthropic.to_neutral(copy.deepcopy(claude_agent_turn(3)))
    assert again.unseen == 0 and again.body == first.body
    grown = anthropic.to_neutral(copy.deepcopy(claude_agent_turn(4)))
    assert 0 < grown.unseen < 300  # only the new step: its call and its result
    edited = anthropic.to_neutral(copy.deepcopy(claude_agent_turn(4, "Be brief. " * 9000)))
    assert edited.unseen > 90_000
    assert edited.body["messages"][0] == {"role": "system", "content": "Be brief. " * 9000}


def test_fixed_parts_convert_as_a_fresh_process_would_and_bad_ones_are_refused_every_time() -> None:
    body = claude_agent_turn(2)
    body["tools"].append({"type": "web_search_20250305", "name": "web_search"})
    expected = fresh(anthropic.to_neutral, body)
    tools = [t["function"]["name"] for t in anthropic.to_neutral(copy.deepcopy(body)).body["tools"]]
    for _ in range(2):
        warm = anthropic.to_neutral(copy.deepcopy(body))
        assert warm.body["messages"] == expected
        assert [t["function"]["name"] for t in warm.body["tools"]] == tools
        assert warm.body["ctxproxy_tools_removed"][0]["name"] == "web_search"
        warm.body["tools"].pop()  # one request's list is its own
    bad = copy.deepcopy(body)
    bad["tools"][1]["input_schema"] = "not an object"
    for _ in range(2):
        with pytest.raises(BadRequest, match=r"tools\.1\.input_schema"):
            anthropic.to_neutral(copy.deepcopy(bad))


def test_responses_unseen_and_its_fixed_tools() -> None:
    body = {
        **codex_turn(2),
        "instructions": "Work carefully. " * 5000,
        "tools": [{"type": "function", "name": "sh", "parameters": {"type": "object"}}],
    }
    expected = fresh(responses.to_neutral, body)
    responses.SEEN.clear()
    responses.FIXED.clear()
    first = responses.to_neutral(copy.deepcopy(body))
    assert first.unseen is not None and first.unseen > 80_000
    again = responses.to_neutral(copy.deepcopy(body))
    assert again.unseen == 0 and again.body["messages"] == expected
    assert again.body["tools"] == [
        {"type": "function", "function": {"name": "sh", "parameters": {"type": "object"}}}
    ]
    grown = copy.deepcopy(body)
    grown["input"].append({"type": "message", "role": "user", "content": "And now?"})
    assert 0 < responses.to_neutral(grown).unseen < 100
