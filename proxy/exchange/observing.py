"""Observe mode: the client's request goes upstream byte for byte (no compaction, no recall
tool); the view ctxproxy would have sent is compiled and recorded beside it, as observed."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

import httpx
from fastapi import Request

from proxy.compile.view import Compiled
from proxy.errors import ProxyError
from proxy.settings import Settings, Upstream
from proxy.upstream import send as up

RAW_BODY = "ctxproxy.raw_body"  # where the body's reader (http/deps.py) leaves its bytes

if TYPE_CHECKING:  # both import this module
    from proxy.exchange.steps import Exchange
    from proxy.exchange.wire import Wire

HEADER = "x-ctxproxy-mode"
MODES = ("compact", "observe")


def observing(request: Request, settings: Settings) -> bool:
    """The request's X-Ctxproxy-Mode where it names a mode, else the configured mode."""
    asked = request.headers.get(HEADER, "").strip().lower()
    return (asked if asked in MODES else settings.mode) == "observe"


async def send(
    request: Request,
    exchange: Exchange,
    upstream: Upstream,
    wire: Wire | None,
    sendable: dict[str, Any],
    compiled: Compiled,
) -> httpx.Response:
    """The client's bytes to the path of its own API. An upstream that does not serve a
    Messages or Responses request natively can only take it translated: the whole history,
    uncompacted, as chat completions."""
    exchange.rounds = None
    raw = request.scope.get(RAW_BODY)
    if wire is None and raw is not None:
        return await _post(exchange, upstream, "/chat/completions", raw, {})
    if wire is not None and raw is not None and wire.serves_natively(upstream):
        wire.native = True
        r = await _post(exchange, upstream, wire.codec.path, raw, wire.headers)
        if r.status_code not in (404, 405):
            return r
        await r.aclose()  # not served there after all: translate from now on
        wire.fallbacks.add((upstream.name, wire.codec.api))
        wire.native = False
    whole = replace(compiled, messages=sendable["messages"])
    if wire is None:
        return await exchange.forward(upstream, sendable, whole)
    wire.native = False
    return await wire.translated(exchange, upstream, sendable, whole)


async def _post(
    exchange: Exchange, upstream: Upstream, path: str, raw: bytes, headers: dict[str, str]
) -> httpx.Response:
    try:
        client = exchange.services.client
        return await up.send(
            client, upstream, "POST", path, content=raw, headers=headers, stream=True
        )
    except ProxyError as exc:
        await exchange.finish(status=exc.status, error=exc.body()["error"])
        raise
