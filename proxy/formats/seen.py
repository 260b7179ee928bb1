"""Items a client sent before, checked and converted once: an agent resends its whole history
every turn, and only the new items need the work.

An item is known by its exact JSON bytes (orjson, keys in the order they came): equal bytes are
an equal item, so its checks passed before and its conversion is the same. What a hit returns
is a fresh copy of each converted message (a new dict, so that one request holding an item
twice holds two messages, as identity-keyed code expects); the values inside are shared and
never changed in place. Charged to the shared cache budget (strategies/budget.py)."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from functools import partial
from typing import Any

import orjson

from strategies.budget import SHARED, CacheBudget
from strategies.prefix import PrefixMemo

Message = dict[str, Any]
OVERHEAD = 256  # per entry: its key, tuple and dict shells
LIST_VALUE = 200  # per item of a known list (an estimate): its tuple and the messages' dict shells


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
    ) -> list[list[Message]]:
        """[convert(item, make(_, i)) for each item at position i]: a prefix of the items that
        an earlier request sent at the same positions comes back without a digest per item.
        `make` checks too: an exception from it is raised and nothing of this list is kept."""

        def tail(known: list[tuple[Message, ...]]) -> list[tuple[Message, ...]]:
            start = len(known)
            return [
                tuple(dict(m) for m in self.convert(item, partial(_placed, make, at)))
                for at, item in enumerate(items[start:], start)
            ]

        return [[dict(m) for m in value] for value in self._lists.values(items, tail)]

    def convert(self, item: Any, make: Callable[[Any], list[Message]]) -> list[Message]:
        """make(item), from an earlier request where it held the same item. `make` checks the
        item too: an exception from it is raised and nothing is kept."""
        try:
            data = orjson.dumps(item)
        except (orjson.JSONEncodeError, TypeError):  # integers past 64 bits, odd keys
            return make(item)
        key = hashlib.sha256(data).digest()  # with SHA extensions, several times blake2b
        hit: tuple[Message, ...] | None = self._held.get(key)
        if hit is not None:
            return [dict(m) for m in hit]
        out = make(item)
        # The converted messages hold about the item's text (twice in memory: str and dicts).
        size = 2 * len(data) + OVERHEAD
        if size <= self._held.budget.largest():
            self._held.put(key, tuple(dict(m) for m in out), size)  # the caller's may change
        return out

    def clear(self) -> None:
        self._held.clear()
        self._lists.clear()


def _placed(make: Callable[[Any, int], list[Message]], at: int, item: Any) -> list[Message]:
    return make(item, at)
