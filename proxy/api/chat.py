"""POST /v1/chat/completions: parse, then run the exchange (proxy/exchange/lifecycle.py)."""

from __future__ import annotations

from typing import Any

from starlette.routing import Route

from proxy.exchange import lifecycle as exchange
from proxy.formats.chat import chat_openapi
from proxy.http.plain import plain_routes

PATHS = ("/v1/chat/completions", "/s/{session}/v1/chat/completions")


def routes() -> list[Route]:
    """Plain routes (proxy/http/plain.py), documented by openapi_paths below."""
    return plain_routes(PATHS, exchange.run)


def openapi_paths() -> dict[str, Any]:
    """The chat route in the OpenAPI document, which FastAPI cannot derive from a plain route."""
    operation = {
        "summary": "Chat Completions",
        "operationId": "chat_completions_v1_chat_completions_post",
        **chat_openapi(),
        "responses": {"200": {"description": "Successful Response"}},
    }
    return {PATHS[0]: {"post": operation}}
