"""Observe mode: the client's request goes upstream byte for byte (no compaction, no recall
tool); the view ctxproxy would have sent is compiled and recorded beside it, as observed."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import httpx
import orjson
from fastapi import Request

from proxy.compile.view import Compiled
from proxy.errors import Forbidden, ProxyError
from proxy.exchange.privacy import without_identity
from proxy.settings import Settings, Upstream
from proxy.upstream import send as up

RAW_BODY = "ctxproxy.raw_body"  # where the body's reader (http/deps.py) leaves its bytes
OPERATOR = "ctxproxy.operator"  # whether the operator sent it (http/plain.py, http/access.py)

if TYPE_CHECKING:  # both import this module
    from proxy.exchange.steps import Exchange
    from proxy.exchange.wire import Wire

HEADER = "x-ctxproxy-mode"
MODES = ("compact", "observe")


def observing(request: Request, settings: Settings) -> bool:
    """The request's X-Ctxproxy-Mode where it names a mode and may choose it (`mode_switch`),
    else the configured mode."""
    asked = request.headers.get(HEADER, "").strip().lower()
    if asked not in MODES or asked == settings.mode:
        return settings.mode == "observe"
    if settings.mode_switch != "clients" and not request.scope.get(OPERATOR):
        raise Forbidden(
            f"Only the operator may choose the mode by {HEADER} (mode_switch: admin)",
            param=HEADER,
        )
    return asked == "observe"


async def send(
    request: Request,
    exchange: Exchange,
    upstream: Upstream,
    wire: Wire | None,
    bodies: tuple[dict[str, Any], dict[str, Any]],
    compiled: Compiled,
) -> httpx.Response:
    """The client's bytes to the path of its own API (`bodies`: as the client sent it, neutral;
    as it is sent). An upstream that does not serve a Messages or Responses request natively
    can only take it translated: the whole history, uncompacted, as chat completions; so does
    a Responses request continued from ctxproxy's own id, whose earlier turns the upstream never
    saw (natively where it can, from the stored history)."""
    exchange.rounds = None
    client, sendable = bodies
    raw = request.scope.get(RAW_BODY)
    if raw is not None and wire is None:
        raw = _client_bytes(raw, client, exchange.services.settings)
        return await _post(exchange, upstream, "/chat/completions", raw, {})
    if raw is not None and wire is not None and wire.continued is None:
        if wire.serves_natively(upstream):
            wire.native = wire.passed = True
            raw = _client_bytes(raw, wire.conversion.raw, exchange.services.settings)
            r = await _post(exchange, upstream, wire.codec.path, raw, wire.headers)
            if r.status_code not in (404, 405):
                return r
            await r.aclose()  # not served there after all: translate from now on
            wire.fallbacks.add((upstream.name, wire.codec.api))
            wire.native = wire.passed = False
    whole = replace(compiled, messages=sendable["messages"])
    if wire is None:
        return await exchange.forward(upstream, sendable, whole)
    return await wire.forward(exchange, upstream, sendable, whole)


def _client_bytes(raw: bytes, client: dict[str, Any], settings: Settings) -> bytes:
    """The client's very bytes; re-encoded only where they hold identity fields that are not
    to be forwarded (exchange/privacy.py): the same request less those."""
    kept = client if settings.forward_client_identity else without_identity(client)
    if kept is client:
        return raw
    try:
        return orjson.dumps(kept)
    except (orjson.JSONEncodeError, TypeError):  # an integer past 64 bits: the standard encoder
        return json.dumps(kept, ensure_ascii=False, separators=(",", ":")).encode()


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
