"""A resent history is checked and forwarded from what its earlier turns left, with the same
outcome as a fresh pass: the same faults and refusals, the same bytes upstream."""

from __future__ import annotations

import json
from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from proxy.errors import BadRequest
from proxy.exchange.pairing import InvalidToolPairing, apply_policy, faults_of
from proxy.formats.chat import chat_head
from proxy.upstream.send import encode_json, encode_parts
from strategies import invariants
from strategies.prefix import as_json, dumped, encoded, request_scope


def call(ids: str) -> dict[str, Any]:
    calls = [
        {"id": i, "type": "function", "function": {"name": "f", "arguments": "{}"}} for i in ids
    ]
    return {"role": "assistant", "content": None, "tool_calls": calls}


def result(i: str) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": i, "content": f"out {i}"}


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


# Long enough that the checks keep what they found (MEMO_FROM messages).
EARLIER = [m for i in range(40) for m in (user(f"q {i}"), {"role": "assistant", "content": "a"})]


MESSAGES = st.one_of(
    st.builds(call, st.text("abc", max_size=3)),
    st.builds(result, st.sampled_from("abcd")),
    st.builds(user, st.sampled_from(["go", "on"])),
)


@given(st.lists(st.lists(MESSAGES, max_size=5), min_size=1, max_size=6), st.integers(0, 9))
def test_pairing_faults_of_a_resent_history_are_a_fresh_scans(
    turns: list[list[dict[str, Any]]], salt: int
) -> None:
    history: list[dict[str, Any]] = [user(f"task {salt}"), *EARLIER]
    for more in turns:
        kept = max(len(history) * 2 // 3, len(EARLIER) + 1)
        history = [*history[:kept], *more]  # grown, rewound or edited
        assert faults_of(history) == invariants.pairing_faults(history)


def test_a_call_left_open_last_turn_is_answered_this_turn() -> None:
    first = [user("task open"), *EARLIER, call("xy"), result("x")]
    assert [(f.index, f.kind) for f in faults_of(first)] == [(81, "unanswered_call")]
    assert faults_of([*first, result("y"), user("next")]) == []


def test_an_old_message_changed_is_refused_where_it_is() -> None:
    history = [user("task old"), call("a"), result("a"), *EARLIER, call("b"), result("b")]
    body = {"model": "m", "messages": history}
    assert apply_policy(body, "reject") is body
    edited = [*history[:2], result("z"), *history[3:], user("next")]
    with pytest.raises(InvalidToolPairing) as caught:
        apply_policy({"model": "m", "messages": edited}, "reject")
    assert caught.value.fault.index == 2


def test_an_old_message_made_invalid_is_refused_though_its_history_was_valid() -> None:
    history = [user(f"line {i}") for i in range(80)]
    assert chat_head({"model": "m", "messages": history}).model == "m"
    bad = [*history[:5], {"role": "user", "content": 5}, *history[6:], user("next")]
    with pytest.raises(BadRequest) as caught:
        chat_head({"model": "m", "messages": bad})
    assert caught.value.param == "messages.5.content"


def test_a_view_left_as_it_came_goes_as_the_same_bytes() -> None:
    messages = [user("é \u2028 😀"), {"role": "assistant", "content": "x", "t": 0.1}]
    body = {"model": "m", "messages": messages, "temperature": 0.5}
    with request_scope():
        dumped(messages)
        view = list(messages)  # a new list of the same messages, as a compile makes it
        outgoing = {**body, "messages": encoded(view, messages)}
        assert encode_json(outgoing) == orjson.dumps(body)
        # by orjson, from the bytes made already (the standard encoder's fallback is slow)
        assert orjson.dumps(outgoing, default=as_json) == orjson.dumps(body)
        changed = [messages[0], {**messages[1], "content": "folded"}]
        assert encoded(changed, messages) is changed
        # A field orjson refuses: the standard encoder writes the whole body, messages too.
        big = {**body, "seed": 2**70, "messages": encoded(view, messages)}
        assert json.loads(encode_json(big)) == {**body, "seed": 2**70}


def test_a_long_view_left_as_it_came_goes_as_its_parts_with_the_same_bytes() -> None:
    messages = [user("é \u2028 😀 \x00"), {"role": "assistant", "content": "x", "t": 0.1}]
    messages += [user("y" * 1000) for _ in range(140)]
    body = {"model": "m", "messages": messages, "temperature": 0.5, "stop": ["\x00"]}
    with request_scope():
        made = dumped(messages)
        outgoing = {**body, "messages": encoded(list(messages), messages)}
        parts = encode_parts(outgoing)
        assert len(parts) == 3 and parts[1] is made  # the history's bytes, not a copy
        assert b"".join(parts) == encode_json(outgoing) == orjson.dumps(body)
        big = {**body, "seed": 2**70, "messages": encoded(list(messages), messages)}
        assert encode_parts(big) == [encode_json(big)]
    assert encode_parts(body) == [orjson.dumps(body)]  # nothing made already: one buffer
    short = {**body, "messages": messages[:2]}
    with request_scope():
        dumped(short["messages"])
        outgoing = {**short, "messages": encoded(list(short["messages"]), short["messages"])}
        assert encode_parts(outgoing) == [orjson.dumps(short)]  # a short one: one buffer
