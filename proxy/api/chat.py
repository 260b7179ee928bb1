"""POST /v1/chat/completions: parse, then run the exchange (proxy/exchange/lifecycle.py)."""

from __future__ import annotations

from typing import Any

from fastapi import Request, Response
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from proxy.exchange import lifecycle as exchange
from proxy.formats.chat import chat_openapi
from proxy.http.deps import json_body, require_client_key

PATHS = ("/v1/chat/completions", "/s/{session}/v1/chat/completions")


async def chat_completions(request: Request, session: str | None = None) -> Response:
    # The key check and the body without FastAPI's dependency injection: on the hot route its
    # machinery cost more than the work (same order: the key first, then the body).
    services = request.app.state.services
    require_client_key(request, services)
    body = await json_body(request, services)
    return await exchange.run(request, body, services, session)


class _PlainRoute(Route):
    async def handle(self, scope: Scope, receive: Receive, send: Send) -> None:
        scope["route"] = self  # the template the metrics label requests with
        await super().handle(scope, receive, send)


async def _chat_plain(request: Request) -> Response:
    return await chat_completions(request, request.path_params.get("session"))


def routes() -> list[Route]:
    """The chat paths as plain Starlette routes: FastAPI's request handling costs most of a
    millisecond a request, and this route uses none of it."""
    return [_PlainRoute(path, _chat_plain, methods=["POST"]) for path in PATHS]


def openapi_paths() -> dict[str, Any]:
    """The chat route in the OpenAPI document, which FastAPI cannot derive from a plain route."""
    operation = {
        "summary": "Chat Completions",
        "operationId": "chat_completions_v1_chat_completions_post",
        **chat_openapi(),
        "responses": {"200": {"description": "Successful Response"}},
    }
    return {PATHS[0]: {"post": operation}}
