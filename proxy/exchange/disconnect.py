"""Give up on work whose client has gone: a request the client abandoned frees its upstream."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable
from typing import TypeVar

import anyio
from starlette.requests import Request

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
    One task per exchange, where a task group per awaited step cost three."""

    def __init__(self, request: Request) -> None:
        self.gone = False
        self._scope: anyio.CancelScope | None = None
        self._task = asyncio.get_running_loop().create_task(self._watch(request))

    async def _watch(self, request: Request) -> None:
        while (await request.receive())["type"] != "http.disconnect":
            pass
        self.gone = True
        if self._scope is not None:
            self._scope.cancel()

    async def guard(self, work: Awaitable[T]) -> T:
        """Await `work`, cancelled if the client disconnects meanwhile; finished work is
        returned even if the client just left (the caller closes it)."""
        if not self.gone:
            with anyio.CancelScope() as scope:
                self._scope = scope
                try:
                    return await work
                finally:
                    self._scope = None
        elif inspect.iscoroutine(work):
            work.close()
        raise ClientClosed("The client closed the connection before the answer")

    def stop(self) -> None:
        """Before the answer is sent: the response watches the client from then on."""
        self._task.cancel()
