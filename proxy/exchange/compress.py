"""POST /v1/compress's work: the chat route's session, store and compile, without forwarding.

Gateways (agentgateway's contextCompression, LiteLLM's and Portkey's guardrail hooks) send the
messages they are about to forward and forward whatever comes back. The view is the one the
proxy would send: same sessions, same stored decisions, same recall refs (`GET
/v1/retrieve/{ref}` gives an original back). The exchange is recorded like any other, its API
named `compress` in the stored request, and finished at once: there is no answer to wait for."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import orjson
from fastapi import Request, Response

from proxy.compile.view import compilation_headers
from proxy.errors import BadRequest, ContextLengthExceeded
from proxy.exchange.prepare import prepare
from proxy.exchange.steps import Exchange
from proxy.exchange.wire import API_KEY
from proxy.observe.timing import Timing
from proxy.sessions.conversations import told, told_id
from proxy.sessions.identify import identify
from proxy.sessions.owners import client_key_id
from proxy.settings import Upstream

if TYPE_CHECKING:
    from proxy.services import Services

API = "compress"
WINDOW = "context_window"
# The share of the room a firing leaves free; a one-shot call fills the room unless it asks
# for headroom (a gateway that sends the same growing session on every call may want some).
HEADROOM = "headroom"
# For a model no upstream serves: the view is compiled by the built-in estimate, as for any
# upstream whose tokenizer is tiktoken; nothing is ever sent to this address.
UNROUTED = Upstream(name="compress", base_url="http://127.0.0.1")


async def run(
    request: Request, body: dict[str, Any], services: Services, session: str | None
) -> Response:
    timing = Timing(time.monotonic())
    asked, headroom = _window(body), _headroom(body)
    chat_body = {k: v for k, v in body.items() if k not in (WINDOW, HEADROOM)}
    chat, sendable = await prepare(
        chat_body, services.settings.compaction.invalid_pairing, identity=True
    )
    upstream = services.settings.upstream_for(chat.model) or UNROUTED
    window = asked
    if window is None and upstream is not UNROUTED:
        window = await services.windows.window(upstream, chat.model)
    if window is None:
        raise BadRequest(
            f"No context window is known for model '{chat.model}': send `context_window`",
            param=WINDOW,
        )
    owner = client_key_id(request, services.settings.api_keys)
    key = identify(request.headers.get("x-session-id"), session, chat_body, owner)
    key = services.conversations.place(key, chat_body)
    exchange = Exchange(services, timing, upstream.name, chat.model)
    exchange.compaction = services.settings.compaction.model_copy(update={HEADROOM: headroom})
    stored = {**chat_body, API_KEY: API}
    factor = services.calibration.factor(upstream.name, chat.model)
    try:
        compiled = await exchange.open(key, (stored, sendable, sendable), upstream, window, factor)
    except ContextLengthExceeded as exc:
        await exchange.record(key, stored, upstream.name, None, refused=exc, counted=sendable)
        await exchange.finish(status=exc.status, error=exc.body()["error"])
        raise
    await exchange.finish(status=200)
    before, after = compiled.tokens_original, compiled.tokens_compiled
    answer = {
        "messages": compiled.messages,
        "tokens_before": before,
        "tokens_after": after,
        "tokens_saved": max(before - after, 0),
        "compression_ratio": round(after / before, 4) if before else 1.0,
        "compaction": compiled.summary(),
        "budget": compiled.prompt_budget,
        "context_window": window,
        "session": told_id(key),
    }
    headers = compilation_headers(compiled) | told(key)
    return Response(orjson.dumps(answer), 200, headers, media_type="application/json")


def _window(body: dict[str, Any]) -> int | None:
    value = body.get(WINDOW)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 0 < value <= 2**31:
        raise BadRequest("`context_window` must be a positive integer of tokens", param=WINDOW)
    return value


def _headroom(body: dict[str, Any]) -> float:
    value = body.get(HEADROOM, 0.0)
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 1:
        raise BadRequest("`headroom` must be a share of the room, from 0 to 1", param=HEADROOM)
    return float(value)
