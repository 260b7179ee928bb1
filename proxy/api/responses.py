"""POST /v1/responses: OpenAI's Responses API (stateless, or continued from the store)."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from fastapi import APIRouter, Request, Response
from starlette.routing import Route

from proxy.exchange import lifecycle as exchange
from proxy.exchange import previous
from proxy.exchange.codecs import RESPONSES
from proxy.exchange.observing import observing
from proxy.exchange.wire import Wire
from proxy.formats import responses
from proxy.formats.groups import Conversion
from proxy.http.deps import ClientAuth, JsonBody, ServicesDep
from proxy.http.plain import plain_routes
from proxy.sessions.owners import client_key_id

if TYPE_CHECKING:
    from proxy.services import Services

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
    wire = Wire(RESPONSES, conversion, request, services.wire_fallbacks)
    earlier = body.get("previous_response_id")
    theirs = isinstance(earlier, str) and await _upstreams_own(request, services, wire, earlier)
    if isinstance(earlier, str) and not theirs:
        owner = client_key_id(request, services.settings.api_keys)
        wire.continued, history = await previous.history(services.store, earlier, owner)
        wire.conversion = _carried(conversion, body, history)
    body = wire.body()
    if theirs:  # the record says which of the upstream's answers this turn continues
        body[previous.UPSTREAM_PREVIOUS] = earlier
    if wire.conversion.raw.get("store") is False:
        body[previous.NO_STORE] = False
    return await exchange.run(request, body, services, session, wire)


async def _upstreams_own(request: Request, services: Services, wire: Wire, earlier: str) -> bool:
    """Whether `earlier` is for the upstream to resolve: observed, the client's request goes to
    an upstream serving Responses itself byte for byte, and its ids are that upstream's own."""
    upstream = services.settings.upstream_for(wire.conversion.body.get("model") or "")
    if upstream is None or not observing(request, services.settings):
        return False
    return wire.serves_natively(upstream) and not await previous.ours(services.store, earlier)


def _carried(
    conversion: Conversion, body: dict[str, Any], history: list[dict[str, Any]]
) -> Conversion:
    """The request with the stored conversation it continues before its own input."""
    neutral = conversion.body
    head = [neutral["messages"][0]] if conversion.head else []
    messages = head + [m for m in history if m.get("role") != "system" or not head]
    messages += neutral["messages"][len(head) :]
    # Sent natively, the whole history goes: the upstream must not add its own to it.
    raw = {k: v for k, v in body.items() if k != "previous_response_id"}
    # The stored history is new to the converters: how much of it is known, unknown.
    return dataclasses.replace(
        conversion, body={**neutral, "messages": messages}, raw=raw, unseen=None
    )
