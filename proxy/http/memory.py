"""A request's memory: nothing of it outlives it, and after a huge one memory goes back to the
system (a collection and malloc_trim once it is done).

glibc keeps what a large request freed in its heaps (and raises its mmap threshold after a big
block is freed, so the next big ones come from the heap too): without a trim, RSS stays at the
peak of the largest request ever served. The trim runs on a worker thread a moment after the
request (one for a burst of them), never on the request's own path.

Ordinary traffic frees memory too, in holes the heap cannot give back from its top: over a
long soak the heap held more free than in use. So blocks of 128 KB and more are mapped on
their own (the threshold fixed, as glibc's own default, instead of rising to 32 MB; set by
`ctxproxy serve`, proxy/process.py), and every 64 MB of request bodies garbage is collected
and the heaps trimmed, on a worker thread. A trim alone was not enough: memory freed only by
a collection (cycles) climbed over a session generation's last turns and stayed after the
requests ended.
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

from proxy import sizes
from strategies.budget import transient
from strategies.prefix import request_scope

log = logging.getLogger("ctxproxy")
TRIM_BYTES = 2 << 20  # a request body at least this large is followed by a trim
TRIM_EVERY = 64 << 20  # and so are this many bytes of bodies of any size, in all
MMAP_BYTES = 128 << 10  # a block at least this large is mapped on its own, unmapped when freed
M_MMAP_THRESHOLD = -3  # mallopt's parameter numbers (malloc.h)
DELAY_S = 0.5  # after the last such request: a burst of them is followed by one trim


def _glibc(name: str) -> Callable[..., int] | None:
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        function: Callable[..., int] = getattr(libc, name)  # glibc only
    except (OSError, AttributeError):
        return None
    return function


_TRIM = _glibc("malloc_trim")
_MALLOPT = _glibc("mallopt")


def tune_malloc() -> None:
    """Large blocks mapped on their own (see the module); once, at start, by `serve`."""
    if _MALLOPT is not None:
        _MALLOPT(M_MMAP_THRESHOLD, MMAP_BYTES)


def give_back(collect: bool = True) -> None:
    """Free what cycles still hold, then return the heaps' free pages to the system."""
    if collect:
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
    finished, schedules `give_back` on a worker thread, and does so again every TRIM_EVERY."""

    def __init__(self, app: ASGIApp, threshold: int = TRIM_BYTES) -> None:
        self.app, self.threshold = app, threshold
        self._pending: asyncio.TimerHandle | None = None
        self._task: asyncio.Task[None] | None = None
        self._since = 0  # body bytes since the last trim
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
            huge = declared >= sizes.TRANSIENT_BYTES
            with request_scope(), transient() if huge else nullcontext():
                await self.app(scope, counting, send)
        finally:
            self.finished(size)

    def finished(self, size: int) -> None:
        """A request's body of `size` bytes is done with: a collection and a trim after a huge
        one, and every TRIM_EVERY bytes of bodies."""
        self._since += size
        if size >= self.threshold:
            self.schedule()
        elif self._since >= TRIM_EVERY and self._pending is None:
            self._start()

    def schedule(self) -> None:
        """A trim DELAY_S from now (the one already scheduled moves there)."""
        if self._pending is not None:
            self._pending.cancel()
        loop = asyncio.get_running_loop()
        self._pending = loop.call_later(DELAY_S, self._start)

    def _start(self) -> None:
        self._pending = None
        if self._task is None or self._task.done():
            self._since = 0
            self._task = asyncio.get_running_loop().create_task(self._trim())

    async def _trim(self) -> None:
        try:
            await asyncio.to_thread(give_back, True)
        except Exception:  # never an error for a request: only memory not given back
            log.exception("giving memory back failed")
        self.trims += 1
