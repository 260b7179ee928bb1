"""The plain routes' requests (chat, Messages, Responses, compress) dispatched ahead of the
middleware stack, in one ASGI layer that makes the checks every request gets: the Host guard,
the request's metrics, its memory, errors in the API's envelope. FastAPI's stack (server
errors, telemetry, body limit, ours, exceptions, exit stack, the router) wraps each message
again at every layer; everything else still goes through it."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from contextlib import nullcontext
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from proxy import sizes
from proxy.http.guard import host_allowed, host_of, refuse
from proxy.http.memory import ReturnMemory, content_length
from proxy.observe.metrics import Metrics
from strategies.budget import transient
from strategies.prefix import request_scope

# An exception handler of the app's (app.py): the error as a response in the API's envelope.
Handler = Callable[[Request, Exception], Awaitable[Response]]
SESSION = "/s/{session}/"  # the session-named form of a path: /s/<id>/v1/...


class Hot:
    """ASGI: a POST to a plain route goes straight to its endpoint; the rest to `stack`."""

    def __init__(
        self,
        stack: ASGIApp,
        routes: Sequence[Route],
        handlers: Mapping[Any, Handler],
        metrics: Metrics,
        allowed: list[str],
    ) -> None:
        self.stack, self.handlers = stack, dict(handlers)
        self.metrics, self.allowed = metrics, allowed
        self.routes = {r.path: r for r in routes}
        self.memory = ReturnMemory(stack)  # its trims after a huge body, for these routes

    def route(self, scope: Scope) -> tuple[Route, dict[str, str]] | None:
        """The plain route a request is for, with its path parameters, or None."""
        if scope["type"] != "http" or scope["method"] != "POST" or scope.get("root_path"):
            return None
        path: str = scope["path"]
        found = self.routes.get(path)
        if found is not None:
            return found, {}
        if not path.startswith("/s/"):
            return None
        session, _, rest = path[3:].partition("/")
        found = self.routes.get(SESSION + rest) if session else None
        return None if found is None else (found, {"session": session})

    def handler(self, exc: Exception) -> Handler | None:
        """The app's handler for `exc`: its class's or its nearest base class's."""
        return next((self.handlers[c] for c in type(exc).__mro__ if c in self.handlers), None)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        matched = self.route(scope)
        if matched is None:
            await self.stack(scope, receive, send)
            return
        host = host_of(scope)
        if not host_allowed(host, self.allowed):
            await refuse(send, host, scope["path"])
            return
        route, params = matched
        scope["route"], scope["path_params"] = route, params
        started, status, size = time.monotonic(), 0, 0  # status: 0 until the answer starts

        async def counting() -> Message:
            nonlocal size
            message = await receive()
            size += len(message.get("body", b""))
            return message

        async def sending(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        request = Request(scope, counting, sending)
        try:
            with request_scope(), transient() if _huge(scope) else nullcontext():
                try:
                    response = await route.endpoint(request)
                    await response(scope, counting, sending)
                except Exception as exc:
                    # As the app's handlers render it (the API's envelope); an error once the
                    # answer has started goes up, as it would through Starlette.
                    handler = self.handler(exc)
                    if status or handler is None:
                        raise
                    await (await handler(request, exc))(scope, counting, sending)
        finally:
            name = route.path
            self.metrics.http_requests.labels("POST", name, str(status or 500)).inc()
            self.metrics.http_latency.labels("POST", name).observe(time.monotonic() - started)
            self.memory.finished(size)


def _huge(scope: Scope) -> bool:
    """A body declared past sizes.TRANSIENT_BYTES: handled without filling the caches."""
    return content_length(scope) >= sizes.TRANSIENT_BYTES
