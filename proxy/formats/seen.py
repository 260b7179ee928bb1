"""Items a client sent before, checked and converted once: an agent resends its whole history
every turn, and only the new items need the work.

An item is known by its exact JSON bytes (orjson, keys in the order they came): equal bytes are
an equal item, so its checks passed before and its conversion is the same. What a hit returns
is a fresh copy of each converted message (a new dict, so that one request holding an item
twice holds two messages, as identity-keyed code expects); the values inside are shared and
never changed in place. Bounded by bytes, least recently used out first."""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import orjson

Message = dict[str, Any]
MAX_BYTES = 8 * 1024 * 1024  # a long agent session's items with room for a few more sessions
OVERHEAD = 256  # per entry: its key, tuple and dict shells


class Seen:
    """One API's converted items, keyed by the items' bytes."""

    def __init__(self, max_bytes: int = MAX_BYTES):
        self.max_bytes = max_bytes
        self._held: OrderedDict[bytes, tuple[tuple[Message, ...], int]] = OrderedDict()
        self._lock = threading.Lock()
        self._total = 0

    def convert(self, item: Any, make: Callable[[Any], list[Message]]) -> list[Message]:
        """make(item), from an earlier request where it held the same item. `make` checks the
        item too: an exception from it is raised and nothing is kept."""
        try:
            data = orjson.dumps(item)
        except (orjson.JSONEncodeError, TypeError):  # integers past 64 bits, odd keys
            return make(item)
        key = hashlib.sha256(data).digest()  # with SHA extensions, several times blake2b
        with self._lock:
            hit = self._held.get(key)
            if hit is not None:
                self._held.move_to_end(key)
        if hit is not None:
            return [dict(m) for m in hit[0]]
        out = make(item)
        size = len(data) + OVERHEAD  # the converted messages hold about the item's text
        if size > self.max_bytes // 4:
            return out
        kept = tuple(dict(m) for m in out)  # the caller's dicts may be changed; these are not
        with self._lock:
            if key not in self._held:
                self._held[key] = (kept, size)
                self._total += size
            while self._total > self.max_bytes:
                _, (_, freed) = self._held.popitem(last=False)
                self._total -= freed
        return out

    def clear(self) -> None:
        with self._lock:
            self._held.clear()
            self._total = 0
