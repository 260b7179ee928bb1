"""POST /v1/responses: OpenAI's Responses API (stateless, or continued from the store)."""

from __future__ import annotations

import dataclasses

from fastapi import APIRouter, Request, Response
from starlette.routing import Route

from proxy.exchange import lifecycle as exchange
from proxy.exchange import previous
from proxy.exchange.codecs import RESPONSES
from proxy.exchange.wire import Wire
from proxy.formats import responses
from proxy.http.deps import ClientAuth, JsonBody, ServicesDep
from proxy.http.plain import plain_routes
from proxy.sessions.owners import client_key_id

router = APIRouter(dependencies=[ClientAuth])
PATHS = ("/v1/responses", "/s/{session}/v1/responses")


def routes() -> list[Route]:
    """Plain routes (proxy/http/plain.py), placed ahead of this router's: they serve
    `create_response`, which the router declares for the OpenAPI document."""
    return plain_routes(PATHS, create_response)


@router.post("/v1/responses")
@router.post("/s/{session}/v1/responses", include_in_schema=False)
async def create_response(
    request: Request, body: JsonBody, services: ServicesDep, session: str | None = None
) -> Response:
    conversion = responses.to_neutral(body)
    # Codex names its conversation in a session_id header.
    session = session or request.headers.get("session_id")
    if isinstance(body.get("previous_response_id"), str):
        owner = client_key_id(request, services.settings.api_keys)
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
        # The stored history is new to the converters: how much of it is known, unknown.
        conversion = dataclasses.replace(
            conversion, body={**neutral, "messages": messages}, raw=raw, unseen=None
        )
    wire = Wire(RESPONSES, conversion, request, services.wire_fallbacks)
    body = wire.body()
    if conversion.raw.get("store") is False:
        body[previous.NO_STORE] = False
    return await exchange.run(request, body, services, session, wire)
