"""POST /v1/chat/completions: parse, then run the exchange (proxy/exchange.py)."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response

from proxy import exchange
from proxy.deps import json_body, require_client_key
from proxy.protocol import chat_openapi

router = APIRouter()


@router.post("/v1/chat/completions", openapi_extra=chat_openapi())
@router.post("/s/{session}/v1/chat/completions", include_in_schema=False)
async def chat_completions(request: Request, session: str | None = None) -> Response:
    # The key check and the body without FastAPI's dependency injection: on the hot route its
    # machinery cost more than the work (same order: the key first, then the body).
    services = request.app.state.services
    require_client_key(request, services)
    body = await json_body(request, services)
    return await exchange.run(request, body, services, session)
