"""POST /v1/compress and GET /v1/retrieve/{ref}: compaction as a service for gateways."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from starlette.routing import Route

from proxy.api.audit import HASH_PREFIX
from proxy.errors import BadRequest, NotFound
from proxy.exchange import compress
from proxy.http.deps import ClientAuth, ServicesDep
from proxy.http.plain import plain_routes
from proxy.offload import hop
from proxy.sessions.owners import client_key_id
from proxy.store import AmbiguousPrefix

router = APIRouter(dependencies=[ClientAuth], tags=["compress"])
PATHS = ("/v1/compress", "/s/{session}/v1/compress")


def routes() -> list[Route]:
    return plain_routes(PATHS, compress.run)


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
