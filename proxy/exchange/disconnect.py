"""Give up on work whose client has gone: a request the client abandoned frees its upstream."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable
from typing import TypeVar

import anyio
from starlette.requests import Request
from starlette.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

from proxy.errors import ProxyError

T = TypeVar("T")


class ClientClosed(ProxyError):
    """The client closed its connection before the answer (nginx's 499); no one reads this."""

    status = 499
    type = "invalid_request_error"
    code = "client_closed_request"


async def unless_disconnected(request: Request, work: Awaitable[T]) -> T:
    """Await `work`, cancelled as soon as the client disconnects (its body is read by then, so
    the next ASGI message can only be the disconnect)."""
    result: list[T] = []
    try:
        async with anyio.create_task_group() as tg:

            async def watch() -> None:
                while (await request.receive())["type"] != "http.disconnect":
                    pass
                tg.cancel_scope.cancel()

            tg.start_soon(watch)
            result.append(await work)
            tg.cancel_scope.cancel()
    except BaseExceptionGroup as group:  # the work's own error, as if awaited directly
        if len(group.exceptions) == 1:
            raise group.exceptions[0] from None
        raise
    if not result:  # finished work is returned even if the client just left: the caller closes it
        raise ClientClosed("The client closed the connection before the answer")
    return result[0]


class Watch:
    """One task watching the client for a whole exchange (its body read, the next ASGI message
    can only be the disconnect): what is awaited through `guard` is cancelled when it comes.
    One task per exchange, where a task group per awaited step cost three; the guarded task is
    cancelled by asyncio's own means (as asyncio.timeout does), where an anyio cancel scope per
    step cost a tenth of a millisecond in looking up the async library."""

    def __init__(self, receive: Receive) -> None:
        self.gone = False
        self._guarded: asyncio.Task[object] | None = None
        self._cancelled = False  # whether this watch cancelled the guarded task
        self._task = asyncio.get_running_loop().create_task(self._watch(receive))

    async def _watch(self, receive: Receive) -> None:
        while (await receive())["type"] != "http.disconnect":
            pass
        self.gone = True
        if self._guarded is not None and not self._cancelled:
            self._cancelled = True
            self._guarded.cancel()

    async def guard(self, work: Awaitable[T]) -> T:
        """Await `work`, cancelled if the client disconnects meanwhile; finished work is
        returned even if the client just left (the caller closes it)."""
        if self.gone:
            if inspect.iscoroutine(work):
                work.close()
            raise ClientClosed("The client closed the connection before the answer")
        task = asyncio.current_task()
        assert task is not None
        self._guarded, self._cancelled = task, False
        try:
            return await work
        except asyncio.CancelledError:
            if not self._cancelled:
                raise
            self._cancelled = False
            if task.uncancel() > 0:  # cancelled by someone else as well (a shutdown)
                raise
            raise ClientClosed("The client closed the connection before the answer") from None
        finally:
            if self._cancelled:  # the work took the cancellation in and ended anyway
                task.uncancel()
            self._guarded, self._cancelled = None, False

    def stop(self) -> None:
        """Before the answer is sent: the response watches the client from then on."""
        self._task.cancel()


class Streamed(StreamingResponse):
    """Starlette's StreamingResponse, the client watched by a `Watch`: Starlette's own (for
    servers of ASGI spec 2.3, uvicorn's) runs a task group of two tasks per stream. A client
    gone ends the stream; the body's generator is closed either way, so its `finally` (the
    answer's record) runs at once, not when it is collected."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        watch = Watch(receive)
        try:
            await watch.guard(self.stream_response(send))
        except ClientClosed:
            pass
        finally:
            watch.stop()
            close = getattr(self.body_iterator, "aclose", None)
            if close is not None:
                await close()
        if self.background is not None:
            await self.background()
