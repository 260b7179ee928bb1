"""The fast path gives what the plain path gave: bodies, hashes, validation, long histories."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import pytest

from proxy.errors import BadRequest
from proxy.formats.chat import chat_head, parse_chat, parse_json
from proxy.sizes import AHEAD_FROM
from proxy.store import Store
from proxy.store.digest import hash_messages
from proxy.testing.records import new_request
from strategies.messages import canonical_json, content_key, message_hash

ODD_MESSAGES: list[dict[str, Any]] = [
    {"role": "user", "content": "plain"},
    {"role": "user", "content": 'é \u2028 \x7f \x00 " \\ \n 😀'},
    {"role": "assistant", "content": None, "temperature_seen": 0.7, "big": 1e16},
    {"role": "user", "content": "x", "n": 2**70, "m": -(2**63) - 1},
    {"role": "user", "content": "lone \ud800 surrogate"},
    {"role": "tool", "tool_call_id": "c", "content": [{"type": "text", "text": "a"}], "z": {}},
    {"role": "user", "content": "nested", "x": [[[[[[[[[[]]]]]]]]]]},
]


@pytest.mark.parametrize("msg", ODD_MESSAGES)
def test_message_hash_is_the_canonical_encoders(msg: dict[str, Any]) -> None:
    expected = canonical_json(msg).encode("utf-8", "surrogatepass")
    assert message_hash(msg) == hashlib.sha256(expected).hexdigest()
    assert content_key(msg) == content_key(dict(reversed(list(msg.items()))))


def test_deep_nesting_takes_the_standard_encoder() -> None:
    deep: Any = "x"
    for _ in range(400):
        deep = [deep]
    msg = {"role": "user", "content": "deep", "x": deep}
    expected = canonical_json(msg).encode()
    assert message_hash(msg) == hashlib.sha256(expected).hexdigest()


def test_parse_json_keeps_what_the_standard_parser_keeps() -> None:
    big = 123456789012345678901234567890
    assert parse_json(b'{"a": %d, "b": -9223372036854775809}' % big) == {
        "a": big,
        "b": -9223372036854775809,
    }
    assert parse_json(b'{"a": 1.5, "s": "\\ud83d\\ude00"}') == {"a": 1.5, "s": "😀"}
    for bad in (b'{"a": NaN}', b'{"a": 1e400}', b'{"s": "\\ud800"}', b"[1]", b"\xff\xfe{}"):
        with pytest.raises(BadRequest):
            parse_json(bad)


VALID = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
CASES: list[dict[str, Any]] = [
    VALID,
    {**VALID, "stream": True, "stream_options": {"include_usage": True}, "max_tokens": 5},
    {**VALID, "stream": "true"},  # pydantic coerces it
    {**VALID, "max_tokens": -1},
    {**VALID, "model": ""},
    {**VALID, "model": "a\nb"},
    {**VALID, "messages": []},
    {**VALID, "messages": [{"role": "robot", "content": "x"}]},
    {**VALID, "messages": [{"role": ["user"], "content": "x"}]},
    {**VALID, "messages": [{"role": "user", "content": [{"text": "no type"}]}]},
    {
        **VALID,
        "messages": [
            {
                "role": "assistant",
                "tool_calls": [{"id": "c", "function": {"name": "f", "arguments": "{}"}}],
            }
        ],
    },
    {**VALID, "messages": [{"role": "assistant", "tool_calls": [{"id": "c"}]}]},
    {**VALID, "tools": ["not a dict"]},
]


@pytest.mark.parametrize("body", CASES)
def test_chat_head_agrees_with_parse_chat(body: dict[str, Any]) -> None:
    try:
        chat = parse_chat(body)
    except BadRequest as exc:
        with pytest.raises(BadRequest) as got:
            chat_head(body)
        assert got.value.body() == exc.body()
        return
    head = chat_head(body)
    assert (head.model, bool(head.stream)) == (chat.model, bool(chat.stream))


def test_a_long_new_history_is_stored_whole_and_in_order(tmp_path: Path) -> None:
    store = Store(f"sqlite:///{tmp_path / 'store.db'}")
    store.upgrade()
    n = AHEAD_FROM * 2 + 37
    messages = [{"role": "user" if i % 2 else "assistant", "content": f"m{i}"} for i in range(n)]
    messages[0] = {"role": "system", "content": "s"}
    ref = store.record_request(
        new_request(
            "long",
            messages,
            request={},
            tokens_original=1,
            tokens_compiled=1,
            hashes=hash_messages(messages),
        )
    )
    assert ref.new_messages == n
    history = store.get_history("long")
    assert history is not None
    assert [m.message for m in history.messages] == messages
    grown = [*messages, {"role": "assistant", "content": "next"}]
    again = store.record_request(
        new_request("long", grown, request={}, tokens_original=1, tokens_compiled=1)
    )
    assert (again.seq, again.new_messages) == (2, 1)
    store.close()
