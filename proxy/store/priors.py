"""A session's newest compaction state as this process recorded it, for its next turn to be
compiled from without a round trip to read it first (PostgreSQL). Only a guess: the turn's
record checks, in its own round trip, that the state is the one the read would have found
(states.guard), and is refused otherwise; the turn is then read, compiled and recorded anew.
The state is the compile's own object; the read would decode an equal one."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from proxy.store import history
from proxy.store.states import Decisions, Prior

SIZE = 256  # sessions remembered, and exchanges open at once (~1 KB each, uncompacted)


@dataclass(frozen=True)
class Cached:
    """The state exchange `exchange_id` stored at the entry whose prefix hash is `prefix`."""

    prefix: str
    exchange_id: int
    prior: Prior


class Priors:
    def __init__(self, size: int = SIZE) -> None:
        self._size = size
        self._open: OrderedDict[int, tuple[str, str, Decisions]] = OrderedDict()
        self._done: OrderedDict[str, Cached] = OrderedDict()
        self._lock = threading.Lock()

    def opened(self, exchange_id: int, session_id: str, prefix: str, decided: Any) -> None:
        """An exchange recorded with its state (`decided`, None: it stored none)."""
        with self._lock:
            self._done.pop(session_id, None)  # the newest state is this one, once finished
            if decided is not None:
                self._open[exchange_id] = (session_id, prefix, decided)
                _trim(self._open, self._size)

    def finished(self, exchange_id: int, prompt_tokens: int | None) -> None:
        """Its answer recorded, with what the upstream counted of its prompt."""
        with self._lock:
            found = self._open.pop(exchange_id, None)
            if found is None:
                return
            session_id, prefix, d = found
            prior = Prior(d.state, d.factor, d.raw_prompt, prompt_tokens, d.tokens_original)
            self._done[session_id] = Cached(prefix, exchange_id, prior)
            self._done.move_to_end(session_id)
            _trim(self._done, self._size)

    def forget(self, exchange_id: int, session_id: str) -> None:
        """The exchange's state was replaced or deleted."""
        with self._lock:
            self._open.pop(exchange_id, None)
            self._done.pop(session_id, None)

    def get(self, session_id: str, chain: Sequence[str]) -> Cached | None:
        """The session's cached state, where the read's first probe would look for it."""
        with self._lock:
            found = self._done.get(session_id)
        first = next(iter(history.probes(len(chain))), None)
        if found is None or first is None or found.prefix not in chain[first[0] : first[1]]:
            return None
        return found


def _trim(d: OrderedDict[Any, Any], size: int) -> None:
    while len(d) > size:
        d.popitem(last=False)
