"""POST /v1/responses: OpenAI's Responses API (stateless, or continued from the store)."""

from __future__ import annotations

import dataclasses

from fastapi import APIRouter, Request, Response

from proxy import exchange
from proxy.deps import ClientAuth, JsonBody, ServicesDep, client_key_id
from proxy.wire import previous, responses
from proxy.wire.codecs import RESPONSES
from proxy.wire.forward import Wire

router = APIRouter(dependencies=[ClientAuth])


@router.post("/v1/responses")
@router.post("/s/{session}/v1/responses", include_in_schema=False)
async def create_response(
    request: Request, body: JsonBody, services: ServicesDep, session: str | None = None
) -> Response:
    conversion = responses.to_neutral(body)
    # Codex names its conversation in a session_id header.
    session = session or request.headers.get("session_id")
    if isinstance(body.get("previous_response_id"), str):
        owner = client_key_id(request, services)
        session_id, earlier = await previous.history(
            services.store, body["previous_response_id"], owner
        )
        session = session or session_id
        neutral = conversion.body
        head = [neutral["messages"][0]] if conversion.head else []
        messages = head + [m for m in earlier if m.get("role") != "system" or not head]
        messages += neutral["messages"][len(head) :]
        # Sent natively, the whole history goes: the upstream must not add its own to it.
        raw = {k: v for k, v in body.items() if k != "previous_response_id"}
        conversion = dataclasses.replace(
            conversion, body={**neutral, "messages": messages}, raw=raw
        )
    wire = Wire(RESPONSES, conversion, request, services.wire_fallbacks)
    body = wire.body()
    if conversion.raw.get("store") is False:
        body[previous.NO_STORE] = False
    return await exchange.run(request, body, services, session, wire)
