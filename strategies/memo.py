"""A least-recently-used cache of a function of one text, charged to a byte budget."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

from strategies.budget import SHARED, CacheBudget

R = TypeVar("R")
OVERHEAD = 128  # per entry: its key tuple, the result's shell and the budget's order


def _size(value: Any) -> int:
    if isinstance(value, str):
        return 49 + len(value)
    if isinstance(value, tuple | frozenset):
        return 64 + sum(_size(v) for v in value)
    return 64


def text_cache(budget: CacheBudget | None = None) -> Callable[[Callable[..., R]], Callable[..., R]]:
    """Cache f(text, *args) by its arguments, each entry charged to `budget` (the process's
    shared one by default) by the text's and the result's bytes; the budget evicts."""

    def wrap(f: Callable[..., R]) -> Callable[..., R]:
        held = (budget or SHARED).cache(f"{f.__module__.rpartition('.')[2]}.{f.__name__}")
        missing = object()

        @functools.wraps(f)
        def cached(text: str, *args: Any) -> R:
            key = (text, *args)
            hit = held.get(key, missing)
            if hit is not missing:
                return hit  # type: ignore[no-any-return]
            result = f(text, *args)
            held.put(key, result, _size(text) + _size(result) + OVERHEAD)
            return result

        cached.held = held  # type: ignore[attr-defined]  # for tests
        cached.cache_clear = held.clear  # type: ignore[attr-defined]  # as lru_cache has it
        return cached

    return wrap
