"""TokenCounter: what it counts, and that it remembers by message hash."""

from __future__ import annotations

import json

import pytest

from proxy.compile.tokens import (
    COUNT_BYTES,
    IMAGE_TOKENS,
    PER_MESSAGE,
    REPLY_PRIMING,
    TokenCounter,
)
from strategies.budget import CacheBudget


@pytest.fixture(scope="module")
def counter() -> TokenCounter:
    return TokenCounter()


def test_text_uses_cl100k(counter):
    assert counter.text("hello world") == 2
    assert counter.text("<|endoftext|>") > 1  # special tokens in content are plain text


def test_role_overhead_and_reply_priming(counter):
    msg = {"role": "user", "content": "hello world"}
    assert counter.count_message(msg) == PER_MESSAGE + 1 + 2
    assert counter.count_messages([msg, msg]) == 2 * (PER_MESSAGE + 3) + REPLY_PRIMING


def test_null_and_list_content(counter):
    assert counter.count_message({"role": "assistant", "content": None}) == PER_MESSAGE + 1
    parts = {
        "role": "user",
        "content": [{"type": "text", "text": "hello"}, {"type": "text", "text": " world"}],
    }
    assert counter.count_message(parts) == PER_MESSAGE + 1 + 2


def test_images_count_by_the_documented_estimate():
    image = {"type": "image_url", "image_url": {"url": "data:image/png;base64," + "A" * 10_000}}
    msg = {"role": "user", "content": [image]}
    assert TokenCounter().count_message(msg) == PER_MESSAGE + 1 + IMAGE_TOKENS
    assert TokenCounter(image_tokens=85).count_message(msg) == PER_MESSAGE + 1 + 85


def test_tool_calls_count_names_and_arguments(counter):
    def with_args(args: str) -> dict:
        fn = {"name": "write_file", "arguments": args}
        return {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": "call_1", "type": "function", "function": fn}],
        }

    small = counter.count_message(with_args("{}"))
    big = counter.count_message(with_args(json.dumps({"content": "word " * 1000})))
    assert big - small >= 1000


def test_tool_message_counts_its_call_id_and_extra_keys(counter):
    base = counter.count_message({"role": "tool", "content": "ok"})
    assert (
        counter.count_message({"role": "tool", "tool_call_id": "call_abc", "content": "ok"}) > base
    )
    extra = {"role": "assistant", "content": "ok", "reasoning_content": "think " * 50}
    assert counter.count_message(extra) >= 50


def test_tools_schema_counted(counter):
    tool = {
        "type": "function",
        "function": {
            "name": "run",
            "description": "Run a shell command",
            "parameters": {"type": "object", "properties": {}},
        },
    }
    assert counter.count_tools(None) == 0 and counter.count_tools([]) == 0
    assert counter.count_tools([tool, tool]) == 2 * counter.count_tools([tool]) > 10


def test_cache_hits_by_content_not_identity():
    counter = TokenCounter()
    counter.count_message({"role": "user", "content": "x " * 100})
    counter._enc = None  # a cache miss would now fail
    assert counter.count_message({"content": "x " * 100, "role": "user"}) > 100


def test_cache_is_bounded():
    budget = CacheBudget(24 * COUNT_BYTES)
    counter = TokenCounter(budget=budget)
    for i in range(30):
        counter.count_message({"role": "user", "content": str(i)})
    assert len(counter._cache) == 24 and budget.used == 24 * COUNT_BYTES


def test_correction_applies_in_estimate_only():
    counter = TokenCounter()
    msgs = [{"role": "user", "content": "hello world"}]
    raw = counter.count_messages(msgs)
    counter.correction = 1.5
    assert counter.count_messages(msgs) == raw
    assert counter.estimate(raw) == -(-raw * 3 // 2)
    assert counter.estimate_request(msgs, None) == counter.estimate(raw)


def test_cjk_is_not_estimated_as_chars_over_four(counter):
    cjk = "数据库连接失败，正在重试" * 10
    assert counter.text(cjk) > 2 * len(cjk) / 4


def test_a_tool_list_seen_before_is_not_tokenized_again() -> None:
    from proxy.compile import tokens

    counter = TokenCounter()
    calls: list[str] = []
    encode = counter.text
    counter.text = lambda text: calls.append(text) or encode(text)  # type: ignore[method-assign]

    def tools(description: str) -> list[dict]:
        schema = {"type": "object", "properties": {"path": {"type": "string"}}}
        return [
            {
                "type": "function",
                "function": {"name": "read", "description": description, "parameters": schema},
            }
        ]

    first = counter.count_tools(tools("Read a file."))
    assert len(calls) == 1
    assert counter.count_tools(tools("Read a file.")) == first  # equal, built anew
    assert len(calls) == 1
    assert counter.count_tools(tools("Read a file, whole.")) > first
    assert counter.corrected(1.3).count_tools(tools("Read a file.")) == first  # raw, shared
    assert len(calls) == 2
    for i in range(tokens.TOOL_LISTS + 10):
        counter.count_tools(tools(f"tool {i}"))
    assert len(counter._tools) == tokens.TOOL_LISTS


def test_the_same_definitions_again_are_counted_without_their_json(monkeypatch) -> None:
    from proxy.compile import tokens

    counter = TokenCounter()
    dumps: list[object] = []
    real = tokens.orjson.dumps

    def spy(value: object, *args: object, **kwargs: object) -> bytes:
        dumps.append(value)
        return real(value, *args, **kwargs)

    monkeypatch.setattr(tokens.orjson, "dumps", spy)
    read = {"type": "function", "function": {"name": "read", "parameters": {"type": "object"}}}
    write = {"type": "function", "function": {"name": "write", "parameters": {"type": "object"}}}
    first = counter.count_tools([read, write])
    assert counter.corrected(1.2).count_tools([read, write]) == first  # a new list, same dicts
    assert len(dumps) == 1
    assert counter.count_tools([read]) < first  # other definitions: by their JSON
    assert counter.count_tools([read, dict(write)]) == first
    assert len(dumps) == 3
