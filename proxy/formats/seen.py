"""Items a client sent before, checked and converted once: an agent resends its whole history
every turn, and only the new items need the work.

An item is known by its exact JSON bytes (orjson, keys in the order they came): equal bytes are
an equal item, so its checks passed before and its conversion is the same. What a hit returns
is a fresh copy of each converted message (a new dict, so that one request holding an item
twice holds two messages, as identity-keyed code expects); the values inside are shared and
never changed in place. Charged to the shared cache budget (strategies/budget.py).

What no earlier request sent is counted in bytes (`unseen`): the exchange's work on a request
is about that much new text (hashes, token counts and stored rows of the rest are known), which
decides whether it is short enough to run on the event loop (exchange/lifecycle.py)."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from functools import partial
from typing import Any, Generic, TypeVar

import orjson

from strategies.budget import SHARED, CacheBudget
from strategies.prefix import PrefixMemo

Message = dict[str, Any]
OVERHEAD = 256  # per entry: its key, tuple and dict shells
LIST_VALUE = 200  # per item of a known list (an estimate): its tuple and the messages' dict shells
UNKNOWN = 1 << 62  # the unseen bytes of an item orjson cannot write: not known to be few
FINGER = 64  # bytes from each end of a fixed part's JSON, with its length: its key
T = TypeVar("T")


class Seen:
    """One API's converted items, keyed by the items' bytes, charged to a cache budget."""

    def __init__(self, name: str, budget: CacheBudget | None = None):
        self._held = (budget or SHARED).cache(name)
        # The values share their text with the entries above, but may outlive them: counted.
        self._lists: PrefixMemo[tuple[Message, ...]] = PrefixMemo(
            name + ".lists", value_bytes=LIST_VALUE, holds_text=True, budget=budget
        )

    def convert_all(
        self, items: list[Any], make: Callable[[Any, int], list[Message]]
    ) -> tuple[list[list[Message]], int]:
        """([convert(item, make(_, i)) for each item at position i], the unseen bytes): a
        prefix of the items that an earlier request sent at the same positions comes back
        without a digest per item. `make` checks too: an exception from it is raised and
        nothing of this list is kept."""
        unseen = [0]

        def tail(known: list[tuple[Message, ...]]) -> list[tuple[Message, ...]]:
            start = len(known)
            out = []
            for at, item in enumerate(items[start:], start):
                converted, new = self._converted(item, partial(_placed, make, at))
                unseen[0] += new
                out.append(tuple(dict(m) for m in converted))
            return out

        values = self._lists.values(items, tail)
        return [[dict(m) for m in value] for value in values], unseen[0]

    def convert(self, item: Any, make: Callable[[Any], list[Message]]) -> list[Message]:
        """make(item), from an earlier request where it held the same item. `make` checks the
        item too: an exception from it is raised and nothing is kept."""
        return self._converted(item, make)[0]

    def _converted(self, item: Any, make: Callable[[Any], list[Message]]) -> tuple[list, int]:
        """(convert(item, make), its bytes if no earlier request sent it, else 0)."""
        try:
            data = orjson.dumps(item)
        except (orjson.JSONEncodeError, TypeError):  # integers past 64 bits, odd keys
            return make(item), UNKNOWN
        key = hashlib.sha256(data).digest()  # with SHA extensions, several times blake2b
        hit: tuple[Message, ...] | None = self._held.get(key)
        if hit is not None:
            return [dict(m) for m in hit], 0
        out = make(item)
        # The converted messages hold about the item's text (twice in memory: str and dicts).
        size = 2 * len(data) + OVERHEAD
        if size <= self._held.budget.largest():
            self._held.put(key, tuple(dict(m) for m in out), size)  # the caller's may change
        return out, len(data)

    def clear(self) -> None:
        self._held.clear()
        self._lists.clear()


class Fixed(Generic[T]):
    """A request's parts that an agent sends unchanged every turn (a system prompt, its tool
    definitions: most of its bytes), checked and converted once per distinct bytes. Known by
    their exact JSON, as items are, but compared whole (a memcmp) instead of digested: a digest
    of ~150 KB costs more than the conversion it would spare. What `make` returns is shared by
    every request that sends those bytes: the caller never changes it in place."""

    def __init__(self, name: str, budget: CacheBudget | None = None):
        self._held = (budget or SHARED).cache(name)

    def convert(self, value: Any, make: Callable[[Any], T]) -> tuple[T, int]:
        """(make(value), the unseen bytes: 0 where an earlier request sent the same value).
        `make` checks too: an exception from it is raised and nothing is kept."""
        try:
            data = orjson.dumps(value)
        except (orjson.JSONEncodeError, TypeError):
            return make(value), UNKNOWN
        key = (len(data), data[:FINGER], data[-FINGER:])
        hit: tuple[bytes, T] | None = self._held.get(key)
        if hit is not None and hit[0] == data:
            return hit[1], 0
        out = make(value)
        size = 2 * len(data) + OVERHEAD  # its bytes, and about as much in what it became
        if size <= self._held.budget.largest():
            self._held.put(key, (data, out), size)
        return out, len(data)

    def clear(self) -> None:
        self._held.clear()


def _placed(make: Callable[[Any, int], list[Message]], at: int, item: Any) -> list[Message]:
    return make(item, at)
