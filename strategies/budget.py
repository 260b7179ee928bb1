"""One byte budget shared by every in-memory cache: their entries in one least-recently-used order.

Each cache charges its entries by approximate bytes (what the entry holds that would otherwise be
freed); while the total passes the budget, the least recently used entry of any cache goes. A
cache that is used every turn thus keeps its entries and an idle one gives its room up. The
budget is set once at start (`resize`, from the `cache_mb` setting); the caches themselves stay
where they are used and know nothing of settings.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, Generic, TypeVar

V = TypeVar("V")
DEFAULT_BYTES = 64 << 20
LARGEST_SHARE = 8  # an entry over 1/8 of the budget is never kept: computed again when needed
_MISSING: Any = object()
# Set while handling a request too large to be anyone's working set (a flood, a pasted dump):
# what it computes is not kept, so that it neither evicts the sessions' entries nor pins memory.
_TRANSIENT: ContextVar[bool] = ContextVar("ctxproxy_transient", default=False)


@contextmanager
def transient() -> Iterator[None]:
    """Within it (and the worker threads it starts), no cache keeps anything new."""
    token = _TRANSIENT.set(True)
    try:
        yield
    finally:
        _TRANSIENT.reset(token)


class CacheBudget:
    """The accounting: bytes held per cache, and the eviction order across all of them."""

    def __init__(self, max_bytes: int = DEFAULT_BYTES) -> None:
        self.max_bytes = max_bytes
        self._lru: OrderedDict[tuple[int, Hashable], tuple[Any, int]] = OrderedDict()
        self._lock = threading.Lock()
        self._caches: list[BudgetedCache[Any]] = []
        self._held: list[int] = []  # bytes per cache, by its slot
        self.used = 0

    def cache(
        self, name: str, on_evict: Callable[[Hashable, Any], None] | None = None
    ) -> BudgetedCache[Any]:
        """A new cache charging this budget; `on_evict(key, value)` runs (under the budget's
        lock) when an entry goes for room, so that a cache can drop what it derived from it."""
        with self._lock:
            cache: BudgetedCache[Any] = BudgetedCache(self, name, len(self._caches), on_evict)
            self._caches.append(cache)
            self._held.append(0)
            return cache

    def resize(self, max_bytes: int) -> None:
        with self._lock:
            self.max_bytes = max_bytes
            self._shrink()

    def largest(self) -> int:
        """The largest entry kept, in bytes."""
        return self.max_bytes // LARGEST_SHARE

    def report(self) -> dict[str, Any]:
        """Bytes used, the budget, and each cache's share (bytes and entries)."""
        with self._lock:
            counts = [0] * len(self._caches)
            for slot, _ in self._lru:
                counts[slot] += 1
            caches: dict[str, dict[str, int]] = {}
            for cache, held, n in zip(self._caches, self._held, counts, strict=True):
                share = caches.setdefault(cache.name, {"bytes": 0, "entries": 0})
                share["bytes"] += held
                share["entries"] += n
            return {"budget_bytes": self.max_bytes, "used_bytes": self.used, "caches": caches}

    def clear(self) -> None:
        with self._lock:
            for (slot, key), (value, _) in self._lru.items():
                self._evicted(slot, key, value)
            self._lru.clear()
            self._held = [0] * len(self._held)
            self.used = 0

    def _shrink(self) -> None:
        while self.used > self.max_bytes and self._lru:
            (slot, key), (value, size) = self._lru.popitem(last=False)
            self._held[slot] -= size
            self.used -= size
            self._evicted(slot, key, value)

    def _evicted(self, slot: int, key: Hashable, value: Any) -> None:
        on_evict = self._caches[slot].on_evict
        if on_evict is not None:
            on_evict(key, value)


class BudgetedCache(Generic[V]):
    """A mapping-like cache whose entries live in its budget's order."""

    def __init__(
        self,
        budget: CacheBudget,
        name: str,
        slot: int,
        on_evict: Callable[[Hashable, Any], None] | None,
    ) -> None:
        self.budget, self.name, self.slot, self.on_evict = budget, name, slot, on_evict

    def get(self, key: Hashable, default: Any = None) -> Any:
        """The value, marked as just used; `default` if absent."""
        budget, full = self.budget, (self.slot, key)
        with budget._lock:
            hit = budget._lru.get(full, _MISSING)
            if hit is _MISSING:
                return default
            budget._lru.move_to_end(full)
            return hit[0]

    def put(self, key: Hashable, value: V, size: int) -> bool:
        """Keep `value` charged `size` bytes; False (and nothing kept) if it is too large."""
        budget, full = self.budget, (self.slot, key)
        if size > budget.max_bytes // LARGEST_SHARE or _TRANSIENT.get():
            return False
        with budget._lock:
            old = budget._lru.pop(full, None)
            if old is not None:
                budget._held[self.slot] -= old[1]
                budget.used -= old[1]
            budget._lru[full] = (value, size)
            budget._held[self.slot] += size
            budget.used += size
            budget._shrink()
        return True

    def pop(self, key: Hashable) -> Any:
        """Remove an entry (no on_evict); its value or None."""
        budget = self.budget
        with budget._lock:
            old = budget._lru.pop((self.slot, key), None)
            if old is None:
                return None
            budget._held[self.slot] -= old[1]
            budget.used -= old[1]
            return old[0]

    def clear(self) -> None:
        budget = self.budget
        with budget._lock:
            mine = [k for k in budget._lru if k[0] == self.slot]
            for full in mine:
                del budget._lru[full]
            budget.used -= budget._held[self.slot]
            budget._held[self.slot] = 0

    def held(self) -> int:
        """Bytes this cache holds."""
        return self.budget._held[self.slot]

    def __len__(self) -> int:
        with self.budget._lock:
            return sum(1 for slot, _ in self.budget._lru if slot == self.slot)

    def __contains__(self, key: Hashable) -> bool:
        return (self.slot, key) in self.budget._lru


# The process's budget: every cache of strategies/ and of the proxy charges it; the app sets
# its size from `cache_mb` at start.
SHARED = CacheBudget()
