"""POST /v1/compress: compaction as a service for gateways (api/retrieve.py gives refs back)."""

from __future__ import annotations

from typing import Any

from starlette.routing import Route

from proxy.exchange import compress
from proxy.formats.chat import chat_openapi
from proxy.http.plain import plain_routes

PATHS = ("/v1/compress", "/s/{session}/v1/compress")


def routes() -> list[Route]:
    """Plain routes (proxy/http/plain.py), documented by openapi_paths below."""
    return plain_routes(PATHS, compress.run)


def openapi_paths() -> dict[str, Any]:
    """POST /v1/compress in the OpenAPI document: a chat request's body, the window and the
    headroom beside it."""
    body = chat_openapi()["requestBody"]
    schema = body["content"]["application/json"]["schema"]
    properties = {
        **schema.get("properties", {}),
        compress.WINDOW: {
            "type": "integer",
            "minimum": 1,
            "description": "The model's window in tokens; else that of the upstream serving "
            "`model`.",
        },
        compress.HEADROOM: {
            "type": "number",
            "minimum": 0,
            "maximum": 1,
            "default": 0,
            "description": "Share of the room (the budget less the system prompts and the "
            "task) left free when the history does not fit; the rest is filled with what was "
            "forgotten. 0 fills the room (best for one-shot calls); a gateway that sends the "
            "same growing session on every call fires less often with some headroom, such as "
            "the server's `compaction.headroom`.",
        },
    }
    schema = {**schema, "properties": properties}
    operation = {
        "summary": "Compress a conversation to fit a window, without forwarding it",
        "operationId": "compress_v1_compress_post",
        "tags": ["compress"],
        "requestBody": {**body, "content": {"application/json": {"schema": schema}}},
        "responses": {"200": {"description": "The view that fits, and its token figures"}},
    }
    return {PATHS[0]: {"post": operation}}
