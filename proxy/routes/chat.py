"""POST /v1/chat/completions: parse, then run the exchange (proxy/exchange.py)."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response

from proxy import exchange
from proxy.deps import ClientAuth, JsonBody, ServicesDep
from proxy.protocol import chat_openapi

router = APIRouter(dependencies=[ClientAuth])


@router.post("/v1/chat/completions", openapi_extra=chat_openapi())
@router.post("/s/{session}/v1/chat/completions", include_in_schema=False)
async def chat_completions(
    request: Request, body: JsonBody, services: ServicesDep, session: str | None = None
) -> Response:
    return await exchange.run(request, body, services, session)
