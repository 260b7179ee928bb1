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
import threading
from collections import OrderedDict, deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

import orjson

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
    """Bounded by bytes (the known lists' JSON, and an estimate per value), oldest out first.
    A session that only grows keeps one list here; one whose last message changes every turn
    (a retry, a benchmark's counter) keeps one per turn until the bound."""

    def __init__(
        self, max_bytes: int = 8 << 20, value_bytes: int = 100, holds_text: bool = False
    ) -> None:
        """`value_bytes`: what one value holds; `holds_text`: the values hold the messages' text
        too (about the list's JSON again), which then counts twice."""
        self.max_bytes, self.value_bytes = max_bytes, value_bytes
        self.text_weight = 2 if holds_text else 1
        self._known: OrderedDict[int, _Known[V]] = OrderedDict()
        self._index: dict[Key, int] = {}  # a key -> the newest known list it ends a prefix of
        self._size = 0
        self._ids = itertools.count()
        self._lock = threading.Lock()

    def values(self, messages: Sequence[Message], extend: Callable[[list[V]], list[V]]) -> list[V]:
        """Every message's value: those of the longest known prefix, then `extend(known)`,
        which returns the values of the messages after the `len(known)` known ones."""
        try:
            data = dumped(messages)
            lasts = [orjson.dumps(m) for m in messages[-1 : -TAIL - 1 : -1]]
        except (orjson.JSONEncodeError, TypeError):  # big integers, odd keys, surrogates
            return extend([])
        n, end = len(messages), len(data) - 1
        ends: dict[Key, int] = {}
        for j, d in enumerate(lasts):
            ends[(n - j, len(d), hash(d))] = end
            end -= len(d) + 1
        known, whole = self._longest(data, ends)
        values = known + extend(known) if len(known) < n else known
        self._keep(data, values, ends, whole)
        return values

    def _longest(self, data: bytes, ends: dict[Key, int]) -> tuple[list[V], int | None]:
        """The values of the longest known prefix, and the known list's id if it is all of it."""
        for key in ends:  # from the list's end
            with self._lock:
                at = self._index.get(key, -1)
                found = self._known.get(at)
            if found is None:
                continue
            end = found.ends[key]
            if len(data) > end and data[end] in (COMMA, BRACKET):
                if data.startswith(found.data[:end]):
                    whole = key[0] == len(found.values)
                    return found.values[: key[0]], at if whole else None
        return [], None

    def _keep(self, data: bytes, values: list[V], ends: dict[Key, int], old: int | None) -> None:
        size = self.text_weight * len(data) + self.value_bytes * len(values)
        if size > self.max_bytes // 4 or not ends:
            return
        with self._lock:
            if (
                old is not None and old in self._known
            ):  # the list grew: what it was is a prefix of what it is
                self._forget(old)
            new = next(self._ids)
            self._known[new] = _Known(data, values, ends, size)
            self._index.update(dict.fromkeys(ends, new))
            self._size += size
            while self._size > self.max_bytes:
                self._forget(next(iter(self._known)))

    def _forget(self, old: int) -> None:
        gone = self._known.pop(old)
        self._size -= gone.size
        for key in gone.ends:
            if self._index.get(key) == old:
                del self._index[key]


# The last few lists dumped, by identity: the hashes and the session index of one request read
# the same list (its messages are never changed in place: the raw history is never rewritten).
_DUMPED: deque[tuple[Sequence[Message], int, bytes]] = deque(maxlen=4)
DUMPED_BYTES = 4 << 20  # a larger list is dumped again rather than kept alive


def dumped(messages: Sequence[Message]) -> bytes:
    """orjson.dumps(messages), once per request's list."""
    for seen, n, data in list(_DUMPED):
        if seen is messages and n == len(messages):
            return data
    data = orjson.dumps(messages)
    if len(data) <= DUMPED_BYTES:
        _DUMPED.append((messages, len(messages), data))
    return data
