"""The chat APIs' routes as plain Starlette routes: FastAPI's request handling (dependency
injection, its request wrapping) costs most of a millisecond a request, and these routes need
none of it. Same order of checks as a FastAPI route with ClientAuth and JsonBody: the key
first, then the body."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from fastapi import Request, Response
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from proxy.exchange.observing import HEADER as MODE_HEADER
from proxy.exchange.observing import OPERATOR
from proxy.http.access import is_operator
from proxy.http.deps import json_body, require_client_key

# (request, the JSON body, the app's services, the session named in the path or None)
Handler = Callable[[Request, dict[str, Any], Any, str | None], Awaitable[Response]]


class PlainRoute(Route):
    async def handle(self, scope: Scope, receive: Receive, send: Send) -> None:
        scope["route"] = self  # the template the metrics label requests with
        await super().handle(scope, receive, send)


def plain_routes(paths: Sequence[str], handler: Handler) -> list[Route]:
    """POST routes for `paths`, each parsing the body and calling `handler`."""

    async def endpoint(request: Request) -> Response:
        services = request.app.state.services
        require_client_key(request, services)
        if MODE_HEADER in request.headers:  # whether it may choose the mode (observing.py)
            request.scope[OPERATOR] = is_operator(request, services.settings)
        body = await json_body(request, services)
        return await handler(request, body, services, request.path_params.get("session"))

    return [PlainRoute(path, endpoint, methods=["POST"]) for path in paths]
