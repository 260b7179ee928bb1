"""Replay states by history prefix, so a turn resumes where the previous turn's compile ended.

A pure speed-up: a state is exactly what replaying the prefix would produce, keyed by a hash
chain over the prefix's messages and by everything that shapes the result (plan, counting).
Without it a compile replays the whole session, which for 1,000 messages costs ~100 ms.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Hashable, Sequence
from dataclasses import dataclass

from strategies.base import CompactionEvent, Lineage, Message


@dataclass(frozen=True)
class State:
    """The view after one request point: raw indexes, or compiled forms with their pass label."""

    point: int
    view: tuple[tuple[int, Message | None, str | None], ...]
    earlier: tuple[CompactionEvent, ...]  # events fired before this point
    last: tuple[CompactionEvent, ...]  # events fired at this point

    @classmethod
    def capture(cls, point: int, view: Sequence[Message], lineage: Lineage, earlier, last):
        spec = tuple(
            (lineage.index(m), None if lineage.label(m) is None else m, lineage.label(m))
            for m in view
        )
        return cls(point, spec, tuple(earlier), tuple(last))

    def restore(self, messages: Sequence[Message], lineage: Lineage) -> list[Message]:
        view = []
        for i, form, label in self.view:
            if form is None or label is None:
                view.append(messages[i])
            else:
                view.append(lineage.derive(form, messages[i], label))
        return view


def prefix_keys(hashes: Sequence[str], points: Sequence[int]) -> list[str]:
    """A digest of messages[:p] for each request point p, from the per-message hashes."""
    chain, keys, done = hashlib.sha256(), [], 0
    for p in points:
        for h in hashes[done:p]:
            chain.update(h.encode())
        done = p
        keys.append(chain.hexdigest())
    return keys


class ReplayCache:
    def __init__(self, size: int = 256):
        self.size = size
        self._states: OrderedDict[tuple[str, Hashable], State] = OrderedDict()

    def get(self, key: tuple[str, Hashable]) -> State | None:
        state = self._states.get(key)
        if state is not None:
            self._states.move_to_end(key)
        return state

    def put(self, key: tuple[str, Hashable], state: State) -> None:
        self._states[key] = state
        self._states.move_to_end(key)
        while len(self._states) > self.size:
            self._states.popitem(last=False)

    def clear(self) -> None:
        self._states.clear()


REPLAYS = ReplayCache()  # like functools.lru_cache: a memo of a pure function, not session state
