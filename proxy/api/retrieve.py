"""GET /v1/retrieve/{ref}: whatever a view's ref names, given back as the client sent it."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request

from proxy.http.access import ViewerDep
from proxy.http.deps import ServicesDep
from proxy.offload import hop
from proxy.recall import refs
from proxy.sessions.identify import identify

# Keyed as the audit API (one rule for who reads stored messages): a client key its own
# sessions' messages, the admin key all; without keys, loopback clients connected directly.
router = APIRouter(tags=["compress"])


@router.get("/v1/retrieve/{ref:path}", summary="What a view's ref names, as the client sent it")
@router.get("/s/{session}/v1/retrieve/{ref:path}", include_in_schema=False)
async def retrieve(
    ref: str, request: Request, services: ServicesDep, viewer: ViewerDep
) -> dict[str, Any]:
    """`ref` as a view names it: `/messages/<hash>` (or the hash alone, 12 to 64 hex
    characters), `history:<n>` or `history:<a>-<b>` (positions in the session's raw history,
    which the X-Session-Id header or the `/s/<id>/` prefix names, as on the chat route)."""
    header, path = request.headers.get("x-session-id"), request.path_params.get("session")
    named = identify(header, path, {}, viewer.key_id).id if header or path else None
    found = await hop(refs.resolve, services.store, ref, viewer.key_id, named)
    return found.answer()
