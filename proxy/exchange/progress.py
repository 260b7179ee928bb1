"""Keeping a streamed answer on its open exchange as it arrives, at a bounded rate, so that a
process killed mid-stream leaves what the client already saw for the next start to record."""

from __future__ import annotations

import logging
import time

from proxy.formats.chat_stream import StreamAssembler
from proxy.store import Store
from proxy.store.paths import OpenTurn

log = logging.getLogger("ctxproxy.progress")

INTERVAL = 1.0  # seconds between writes of one stream's progress, after the first text


class Progress:
    def __init__(self, store: Store, turn: OpenTurn | None, interval: float = INTERVAL):
        self.store, self.turn, self.interval = store, turn, interval
        self._last: float | None = None

    async def saw(self, answer: StreamAssembler) -> None:
        """Called for each chunk before it is relayed: writes the first text at once, then at
        most once per interval. A failed write is logged; the stream goes on."""
        if self.turn is None or self.turn.ref is None:
            return
        if not (answer.content or answer.tool_calls):
            return
        now = time.monotonic()
        if self._last is not None and now - self._last < self.interval:
            return
        self._last = now
        try:
            await self.store.save_turn_progress(self.turn, answer.message())
        except Exception:
            log.exception("saving a stream's progress failed")
