"""POST /v1/compress and GET /v1/retrieve/{ref}: compaction as a service for gateways."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from starlette.routing import Route

from proxy.api.audit import HASH_PREFIX
from proxy.errors import BadRequest, NotFound
from proxy.exchange import compress
from proxy.formats.chat import chat_openapi
from proxy.http.deps import ClientAuth, ServicesDep
from proxy.http.plain import plain_routes
from proxy.offload import hop
from proxy.sessions.owners import client_key_id
from proxy.store import AmbiguousPrefix

router = APIRouter(dependencies=[ClientAuth], tags=["compress"])
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


@router.get("/v1/retrieve/{ref:path}", summary="A folded original, as the client sent it")
async def retrieve(ref: str, request: Request, services: ServicesDep) -> dict[str, Any]:
    """`ref` as a placeholder names it (`/messages/<hash>` or the hash alone, at least 12 hex
    characters); only the messages of the client key's own sessions, when keys are set."""
    digest = ref.removeprefix("/").removeprefix("messages/")
    if not HASH_PREFIX.fullmatch(digest):
        raise BadRequest("A reference is /messages/<12 to 64 hex characters>", param="ref")
    owner = client_key_id(request, services.settings.api_keys)
    try:
        found = await hop(services.store.get_message, digest, owner)
    except AmbiguousPrefix:
        raise BadRequest(
            f"'{digest}' is the prefix of several messages; give more of the hash", param="ref"
        ) from None
    if found is None:
        raise NotFound(f"No stored message '{digest}'", param="ref")
    message = found.message
    return {"ref": f"/messages/{found.hash}", "message": message, "content": message.get("content")}
