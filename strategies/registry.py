"""Strategies by name: register, unregister, get."""

from __future__ import annotations

from collections.abc import Callable

from strategies.context import Strategy

STRATEGIES: dict[str, Strategy] = {}


def register(name: str) -> Callable[[Strategy], Strategy]:
    def deco(fn: Strategy) -> Strategy:
        STRATEGIES[name] = fn
        return fn

    return deco


def unregister(name: str) -> None:
    STRATEGIES.pop(name, None)


def get(name: str) -> Strategy:
    try:
        return STRATEGIES[name]
    except KeyError:
        known = ", ".join(sorted(STRATEGIES))
        raise KeyError(f"unknown compaction strategy {name!r} (known: {known})") from None
