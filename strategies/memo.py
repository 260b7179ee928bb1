"""A least-recently-used cache of a function of one text, bounded by the bytes it holds."""

from __future__ import annotations

import functools
import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Any, TypeVar

R = TypeVar("R")

# Per cache: the texts an agent's view holds across turns fit (a 200k-token history is about
# 800 KB); a count bound would not do, as one tool output can be megabytes.
DEFAULT_BYTES = 4 * 1024 * 1024


def _size(value: Any) -> int:
    if isinstance(value, str):
        return len(value)
    if isinstance(value, tuple):
        return 64 + sum(_size(v) for v in value)
    return 64


def text_cache(max_bytes: int = DEFAULT_BYTES) -> Callable[[Callable[..., R]], Callable[..., R]]:
    """Cache f(text, *args) by its arguments; least recently used out first while the texts and
    results held pass `max_bytes`. A text over a quarter of it is never kept."""

    def wrap(f: Callable[..., R]) -> Callable[..., R]:
        held: OrderedDict[tuple[Any, ...], tuple[R, int]] = OrderedDict()
        lock = threading.Lock()
        total = 0

        @functools.wraps(f)
        def cached(text: str, *args: Any) -> R:
            nonlocal total
            key = (text, *args)
            with lock:
                hit = held.get(key)
                if hit is not None:
                    held.move_to_end(key)
                    return hit[0]
            result = f(text, *args)
            size = len(text) + _size(result) + 128
            if size > max_bytes // 4:
                return result
            with lock:
                if key not in held:
                    held[key] = (result, size)
                    total += size
                while total > max_bytes:
                    _, (_, freed) = held.popitem(last=False)
                    total -= freed
            return result

        def cache_clear() -> None:
            nonlocal total
            with lock:
                held.clear()
                total = 0

        cached.held = held  # type: ignore[attr-defined]  # for tests
        cached.cache_clear = cache_clear  # type: ignore[attr-defined]  # as lru_cache has it
        return cached

    return wrap
