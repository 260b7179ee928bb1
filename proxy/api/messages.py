"""POST /v1/messages and /v1/messages/count_tokens: Anthropic's Messages API, for Claude Code."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response
from starlette.routing import Route

from proxy.compile.view import compile_request
from proxy.errors import ContextLengthExceeded, ModelNotFound
from proxy.exchange import lifecycle as exchange
from proxy.exchange.codecs import MESSAGES
from proxy.exchange.wire import Wire
from proxy.formats import anthropic
from proxy.formats.chat import parse_chat
from proxy.http.deps import ClientAuth, JsonBody, ServicesDep
from proxy.http.plain import plain_routes
from proxy.offload import hop

router = APIRouter(dependencies=[ClientAuth])
PATHS = ("/v1/messages", "/s/{session}/v1/messages")


def routes() -> list[Route]:
    """Plain routes (proxy/http/plain.py), placed ahead of this router's: they serve
    `messages`, which the router declares for the OpenAPI document."""
    return plain_routes(PATHS, messages)


@router.post("/v1/messages")
@router.post("/s/{session}/v1/messages", include_in_schema=False)
async def messages(
    request: Request, body: JsonBody, services: ServicesDep, session: str | None = None
) -> Response:
    conversion = anthropic.to_neutral(body)
    wire = Wire(MESSAGES, conversion, request, services.wire_fallbacks)
    return await exchange.run(request, wire.body(), services, session, wire)


@router.post("/v1/messages/count_tokens")
@router.post("/s/{session}/v1/messages/count_tokens", include_in_schema=False)
async def count_tokens(
    body: JsonBody, services: ServicesDep, session: str | None = None
) -> dict[str, int]:
    """What the prompt takes once compiled for the upstream's window (estimated): the figure an
    agent needs to judge its room, since ctxproxy compacts what it sends."""
    neutral = anthropic.to_neutral({"max_tokens": 1, **body}).body
    chat = parse_chat(neutral)
    upstream = services.settings.upstream_for(chat.model)
    if upstream is None:
        raise ModelNotFound(chat.model)
    window = await services.windows.window(upstream, chat.model)
    try:
        compiled = await hop(
            lambda: compile_request(
                neutral,
                window=window,
                settings=services.settings.compaction,
                counter=services.counter,
            )
        )
    except ContextLengthExceeded as exc:
        return {"input_tokens": exc.needed}
    return {"input_tokens": compiled.tokens_compiled}
