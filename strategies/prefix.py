"""Per-message values of message lists seen before, found by content: an agent resends its whole
history each turn, so only the messages after the longest prefix already seen are computed.

A list is known by its JSON bytes (orjson: types, key order and floats as sent). A new list
starts with the first p messages of a known one when its bytes start with the known bytes up to
the end of message p and go on with a comma or the closing bracket. Such a p is looked for
among the last few messages of both (a turn adds a few, a retry replaces the last) and checked
with one comparison of bytes: a long history costs C-speed work, not a Python step per message.
"""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Callable, Hashable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from operator import is_
from typing import Any, Generic, TypeVar

import orjson

from strategies.budget import SHARED, CacheBudget
from strategies.messages import Message

V = TypeVar("V")
TAIL = 8  # positions from a list's end where a known prefix may end
COMMA, BRACKET = ord(","), ord("]")
Key = tuple[int, int, int]  # (messages up to here, this one's length in bytes, its bytes' hash)


@dataclass(frozen=True)
class _Known(Generic[V]):
    data: bytes  # the list's JSON
    values: list[V]
    ends: dict[Key, int]  # where in `data` the message a key names ends
    size: int


class PrefixMemo(Generic[V]):
    """Its known lists charged to a byte budget (their JSON, and an estimate per value), least
    recently used out first. A session that only grows keeps one list here; one whose last
    message changes every turn (a retry, a benchmark's counter) keeps one per turn."""

    def __init__(
        self,
        name: str,
        value_bytes: int = 100,
        holds_text: bool = False,
        budget: CacheBudget | None = None,
    ) -> None:
        """`value_bytes`: what one value holds (measure it: tracemalloc over a few thousand);
        `holds_text`: the values hold the messages' text too (about the list's JSON again),
        which then counts twice."""
        self.value_bytes = value_bytes
        self.text_weight = 2 if holds_text else 1
        self.budget = budget or SHARED
        self._known = self.budget.cache(name, on_evict=self._evicted)
        self._index: dict[Key, int] = {}  # a key -> the newest known list it ends a prefix of
        self._ids = itertools.count()

    def values(self, messages: Sequence[Message], extend: Callable[[list[V]], list[V]]) -> list[V]:
        """Every message's value: those of the longest known prefix, then `extend(known)`,
        which returns the values of the messages after the `len(known)` known ones."""
        try:
            dump = _dump(messages)
            ends = dump.ends()
        except (orjson.JSONEncodeError, TypeError):  # big integers, odd keys, surrogates
            return extend([])
        known, whole = self._longest(dump, ends)
        values = known + extend(known) if len(known) < len(messages) else known
        self._keep(dump.data, values, ends, whole)
        return values

    def _longest(self, dump: _Dump, ends: dict[Key, int]) -> tuple[list[V], int | None]:
        """The values of the longest known prefix, and the known list's id if it is all of it."""
        data = dump.data
        for key in ends:  # from the list's end
            at = self._index.get(key, -1)
            found: _Known[V] | None = self._known.get(at)
            if found is None:
                continue
            end = found.ends[key]
            if len(data) > end and data[end] in (COMMA, BRACKET):
                if dump.starts_with(found.data, end):
                    whole = key[0] == len(found.values)
                    return found.values[: key[0]], at if whole else None
        return [], None

    def _keep(self, data: bytes, values: list[V], ends: dict[Key, int], old: int | None) -> None:
        size = self.text_weight * len(data) + self.value_bytes * len(values) + 200 * len(ends)
        if size > self.budget.largest() or not ends:
            return
        if old is not None:  # the list grew: what it was is a prefix of what it is
            gone = self._known.pop(old)
            if gone is not None:
                self._evicted(old, gone)
        new = next(self._ids)
        self._index.update(dict.fromkeys(ends, new))
        self._known.put(new, _Known(data, values, ends, size), size)

    def clear(self) -> None:
        """Forget every known list."""
        self._known.clear()
        self._index.clear()

    def _evicted(self, old: Hashable, gone: _Known[V]) -> None:
        """Its keys out of the index (under the budget's lock: no lock of this memo's here; a
        key another thread just pointed elsewhere may go too, which costs only a miss)."""
        index = self._index
        for key in gone.ends:
            if index.get(key) == old:
                index.pop(key, None)


class _Dump:
    """A list's JSON as one request made it, the keys of its last messages (where in it each
    ends), and which known lists' bytes it was found to start with: the memos of one request
    (checks, hashes, counts, the session index) compare its bytes with the same known list."""

    def __init__(self, messages: Sequence[Message]) -> None:
        self.messages, self.n = messages, len(messages)
        self.data = orjson.dumps(messages)
        self._ends: dict[Key, int] | None = None
        self._starts: dict[tuple[int, int], tuple[bytes, bool]] = {}  # held: their ids stay

    def ends(self) -> dict[Key, int]:
        """Each of the last TAIL messages' key and the offset of its last byte in `data`."""
        if self._ends is None:
            lasts = [orjson.dumps(m) for m in self.messages[-1 : -TAIL - 1 : -1]]
            n, end = self.n, len(self.data) - 1
            ends: dict[Key, int] = {}
            for j, d in enumerate(lasts):
                ends[(n - j, len(d), hash(d))] = end
                end -= len(d) + 1
            self._ends = ends
        return self._ends

    def starts_with(self, known: bytes, end: int) -> bool:
        """Whether `data` starts with known[:end] (compared once a request, without a copy)."""
        found = self._starts.get((id(known), end))
        if found is None:
            found = self._starts[(id(known), end)] = (
                known,
                self.data.startswith(memoryview(known)[:end]),
            )
        return found[1]


# The lists a request dumped, by identity: the hashes, the token counts and the session index of
# one request read the same list (its messages are never changed in place: the raw history is
# never rewritten). Held by the request's context (`request_scope`; worker threads run in a copy
# that shares the holder), so that nothing of a request outlives it; outside a scope, none kept.
_DUMPS: ContextVar[deque[_Dump] | None] = ContextVar("ctxproxy_dumps", default=None)


@contextmanager
def request_scope() -> Iterator[None]:
    """Within it (one request's handling), a list is dumped once."""
    held: deque[_Dump] = deque(maxlen=4)
    token = _DUMPS.set(held)
    try:
        yield
    finally:
        _DUMPS.reset(token)
        held.clear()  # an idle worker thread may keep the last context it ran in


class Encoded:
    """Messages with the JSON bytes this request already made of them: what an encoder writes
    for them (`as_json`), so that a long history is not encoded twice. Not a dataclass: orjson
    would write its fields rather than ask `as_json`."""

    def __init__(self, messages: Sequence[Message], data: bytes) -> None:
        self.messages, self.data = messages, data


def encoded(messages: Sequence[Message], sent: Sequence[Message]) -> Sequence[Message] | Encoded:
    """`messages` to encode: Encoded when they are the very messages of `sent`, a list this
    request dumped already (a view that left a history as it came); else `messages`."""
    held = _DUMPS.get()
    if held is None or len(messages) != len(sent) or not all(map(is_, messages, sent)):
        return messages
    for dump in list(held):
        if dump.messages is sent and dump.n == len(sent):
            return Encoded(messages, dump.data)
    return messages


def as_json(value: Any) -> Any:
    """orjson's `default` for Encoded: its bytes, written as they are (orjson.Fragment)."""
    if isinstance(value, Encoded):
        return orjson.Fragment(value.data)
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


def as_data(value: Any) -> Any:
    """The standard encoder's `default` for Encoded: its messages."""
    if isinstance(value, Encoded):
        return list(value.messages)
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


def dumped(messages: Sequence[Message]) -> bytes:
    """orjson.dumps(messages), once per request's list."""
    return _dump(messages).data


def _dump(messages: Sequence[Message]) -> _Dump:
    held = _DUMPS.get()
    if held is None:
        return _Dump(messages)
    for dump in list(held):
        if dump.messages is messages and dump.n == len(messages):
            return dump
    dump = _Dump(messages)
    held.append(dump)
    return dump
