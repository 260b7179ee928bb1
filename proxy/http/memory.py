"""A request's memory: nothing of it outlives it, and after a huge one memory goes back to the
system (a collection and malloc_trim once it is done).

glibc keeps what a large request freed in its heaps (and raises its mmap threshold after a big
block is freed, so the next big ones come from the heap too): without a trim, RSS stays at the
peak of the largest request ever served. The trim runs on a worker thread a moment after the
request (one for a burst of them), never on the request's own path.
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import gc
import logging
from collections.abc import Callable
from contextlib import nullcontext

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from strategies.budget import transient
from strategies.prefix import request_scope

log = logging.getLogger("ctxproxy")
TRIM_BYTES = 2 << 20  # a request body at least this large is followed by a trim
# A body declared at least this large (a 4M-token history, past any model's window) is handled
# without filling the caches: it would evict every session's entries and pin memory after.
TRANSIENT_BYTES = 16 << 20
DELAY_S = 0.5  # after the last such request: a burst of them is followed by one trim


def _malloc_trim() -> Callable[[int], int] | None:
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name or "libc.so.6")
        trim: Callable[[int], int] = libc.malloc_trim  # glibc only
    except (OSError, AttributeError):
        return None
    return trim


_TRIM = _malloc_trim()


def give_back() -> None:
    """Free what cycles still hold, then return the heaps' free pages to the system."""
    gc.collect()
    if _TRIM is not None:
        _TRIM(0)


def content_length(scope: Scope) -> int:
    for name, value in scope.get("headers") or ():
        if name == b"content-length":
            return int(value) if value.isdigit() else 0
    return 0


class ReturnMemory:
    """ASGI middleware: counts each request's body bytes; after one of TRIM_BYTES or more has
    finished, schedules `give_back` on a worker thread."""

    def __init__(self, app: ASGIApp, threshold: int = TRIM_BYTES) -> None:
        self.app, self.threshold = app, threshold
        self._pending: asyncio.TimerHandle | None = None
        self._task: asyncio.Task[None] | None = None
        self.trims = 0  # done so far: for tests and /stats

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        size = 0

        async def counting() -> Message:
            nonlocal size
            message = await receive()
            size += len(message.get("body", b""))
            return message

        declared = content_length(scope)
        try:
            with request_scope(), transient() if declared >= TRANSIENT_BYTES else nullcontext():
                await self.app(scope, counting, send)
        finally:
            if size >= self.threshold:
                self.schedule()

    def schedule(self) -> None:
        """A trim DELAY_S from now (the one already scheduled moves there)."""
        if self._pending is not None:
            self._pending.cancel()
        loop = asyncio.get_running_loop()
        self._pending = loop.call_later(DELAY_S, self._start)

    def _start(self) -> None:
        self._pending = None
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._trim())

    async def _trim(self) -> None:
        try:
            await asyncio.to_thread(give_back)
        except Exception:  # never an error for a request: only memory not given back
            log.exception("giving memory back failed")
        self.trims += 1
