"""Keeping a streamed answer on its open exchange as it arrives, at a bounded rate, so that a
process killed mid-stream leaves what the client already saw for the next start to record."""

from __future__ import annotations

import logging
import time

from proxy import offload
from proxy.formats.chat_stream import StreamAssembler
from proxy.store import RequestRef, Store

log = logging.getLogger("ctxproxy.progress")

INTERVAL = 1.0  # seconds between writes of one stream's progress, after the first text


class Progress:
    def __init__(
        self,
        store: Store,
        ref: RequestRef | None,
        here: bool = False,
        interval: float = INTERVAL,
        looped: bool = False,
    ):
        self.store, self.ref, self.interval = store, ref, interval
        self.here = here  # written on the event loop (the exchange's `here`, offload.py)
        self.looped = looped  # its round trip waited for on the loop (the exchange's `looped`)
        self._last: float | None = None

    async def saw(self, answer: StreamAssembler) -> None:
        """Called for each chunk before it is relayed: writes the first text at once, then at
        most once per interval. A failed write is logged; the stream goes on."""
        if self.ref is None or not (answer.content or answer.tool_calls):
            return
        now = time.monotonic()
        if self._last is not None and now - self._last < self.interval:
            return
        self._last = now
        try:
            if self.looped:
                await self.store.save_progress_looped(self.ref, answer.message())
            else:
                await offload.run(self.here, self.store.save_progress, self.ref, answer.message())
        except Exception:
            log.exception("saving a stream's progress failed")
