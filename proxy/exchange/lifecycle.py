"""The exchange lifecycle: identify, store, compile the view, forward, relay, record.

Routes parse their API's request and call `run`; this module knows the neutral
(OpenAI chat) form only."""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from contextlib import nullcontext
from functools import partial
from typing import TYPE_CHECKING, Any, TypeVar

import anyio
import httpx
from fastapi import Request, Response
from starlette.types import Receive, Scope, Send

from proxy import sizes
from proxy.compile.view import (
    Compiled,
    asked_tokens,
    compilation_headers,
)
from proxy.errors import (
    ContextLengthExceeded,
    ModelNotFound,
    ProxyError,
)
from proxy.exchange.disconnect import Streamed, Watch
from proxy.exchange.guards import overflow_of, read_checked, unless_gone
from proxy.exchange.observing import HEADER as MODE_HEADER
from proxy.exchange.observing import RAW_BODY, observing
from proxy.exchange.observing import send as send_observed
from proxy.exchange.prepare import prepare
from proxy.exchange.relay import relay
from proxy.exchange.steps import Exchange
from proxy.observe.timing import Timing
from proxy.recall import tool as recall
from proxy.sessions.conversations import told, told_id
from proxy.sessions.identify import identify
from proxy.sessions.owners import client_key_id
from proxy.settings import Upstream
from proxy.upstream import send as up
from strategies.budget import transient

if TYPE_CHECKING:  # both import this module
    from proxy.exchange.wire import Wire
    from proxy.services import Services

log = logging.getLogger("ctxproxy.exchange")
T = TypeVar("T")


async def run(
    request: Request,
    body: dict[str, Any],
    services: Services,
    session: str | None,
    wire: Wire | None = None,
) -> Response:
    """One chat exchange: identify, store, compile the view, forward, relay, record.

    `wire` (proxy/exchange/wire.py) is how an exchange that came in on another API than chat
    completions is forwarded and answered; `body` is then its neutral form."""
    timing = Timing(time.monotonic())
    messages = body.get("messages")
    many = isinstance(messages, list) and len(messages) >= sizes.TRANSIENT_MESSAGES
    try:
        with transient() if many else nullcontext():
            return await _exchange(request, body, services, session, wire, timing)
    except ProxyError as exc:  # an error answer says what ctxproxy cost too
        exc.headers = {**(exc.headers or {}), "server-timing": timing.header()}
        raise


async def _exchange(
    request: Request,
    body: dict[str, Any],
    services: Services,
    session: str | None,
    wire: Wire | None,
    timing: Timing,
) -> Response:
    # The wire shape checked; `sendable` is what is compiled and sent (repaired, if the policy
    # says so), while `body` stays the raw request, stored as the client sent it.
    settings = services.settings
    observed = observing(request, settings)
    pairing = settings.compaction.invalid_pairing
    if observed and pairing == "reject":  # the client's request goes as sent; the view repaired
        pairing = "repair"
    chat, sendable = await prepare(body, pairing, settings.forward_client_identity)
    upstream = services.settings.upstream_for(chat.model)
    if upstream is None:
        raise ModelNotFound(chat.model)
    exchange = Exchange(services, timing, upstream.name, chat.model)
    exchange.observed = observed
    owner = client_key_id(request, services.settings.api_keys)
    key = identify(request.headers.get("x-session-id"), session, body, owner)
    key = services.conversations.place(wire.session(key) if wire else key, body)
    if wire is not None:  # a Responses id tells its continuation what this answer tells
        wire.told = told_id(key) is not None
    window = await services.windows.window(upstream, chat.model)
    # Wherever the recall tool may be offered the budget leaves room for it, so offering it
    # never changes which view is sent.
    offered = services.settings.recall.enabled and recall.wanted(sendable, upstream.tools)
    counted = recall.with_tool(sendable) if offered else sendable
    factor = services.calibration.factor(upstream.name, chat.model)
    try:
        bodies = (body, sendable, counted)
        compiled = await exchange.open(
            key, bodies, upstream, window, factor, _sizes(request, wire), record_during_send=True
        )
    except ContextLengthExceeded as exc:
        with timing.span("store"):
            await exchange.record(key, body, upstream.name, None, refused=exc, counted=counted)
        if not exchange.observed or exchange.refused is None:
            await exchange.finish(status=exc.status, error=exc.body()["error"])
            if exchange.refused is not None:  # its real figures, as an answer's would be
                exc.headers = compilation_headers(exchange.refused) | told(key)
            raise
        compiled = exchange.refused  # observed: ctxproxy would have refused; the upstream decides
    exchange.watch = Watch(request.receive)
    try:
        r, compiled = await _forward(
            request, exchange, upstream, wire, (body, sendable, counted), compiled
        )
        headers = compilation_headers(compiled) | told(key)
        if exchange.observed:
            headers[MODE_HEADER] = "observe"
        if exchange.limit is not None:
            headers["x-ctxproxy-max-tokens"] = f"{asked_tokens(sendable)}->{exchange.limit}"
        exchange.deferring = True  # the answer's record is written once its bytes are sent
        try:
            stream = bool(chat.stream)
            if wire is not None:
                answer = await wire.answer(request, exchange, r, upstream, headers, stream)
            else:
                answer = await _answer(request, exchange, r, upstream, headers, stream)
        except BaseException:
            with anyio.CancelScope(shield=True):
                await exchange.flush()
            raise
    finally:
        exchange.watch.stop()
        exchange.watch = None
        with anyio.CancelScope(shield=True):  # however it ended, the request is recorded
            await exchange.recorded()
    return Recorded(answer, exchange)


def _sizes(request: Request, wire: Wire | None) -> tuple[int | None, int | None]:
    """The body's bytes as read (None: not read whole) and those no earlier request held (an
    agent's next turn, where its wire knows): the store chooses the turn's path by them."""
    raw = request.scope.get(RAW_BODY)
    unseen = wire.conversion.unseen if wire is not None else None
    return (None if raw is None else len(raw)), unseen


async def _forward(
    request: Request,
    exchange: Exchange,
    upstream: Upstream,
    wire: Wire | None,
    bodies: tuple[dict[str, Any], dict[str, Any], dict[str, Any]],
    compiled: Compiled,
) -> tuple[httpx.Response, Compiled]:
    """The view upstream (refitted once if the upstream counts it over its window), or in
    observe mode the client's own request. `bodies`: as the client sent it, as it is to be
    sent, as it is counted."""
    body, sendable, counted = bodies
    if exchange.observed:
        with exchange.timing.span("upstream"):
            sent = send_observed(request, exchange, upstream, wire, (body, sendable), compiled)
            return await unless_gone(request, exchange, exchange.alongside(sent)), compiled
    send = exchange.forward if wire is None else partial(wire.forward, exchange)
    return await _send_fitted(request, exchange, upstream, send, (sendable, counted), compiled)


async def _answer(
    request: Request,
    exchange: Exchange,
    r: httpx.Response,
    upstream: Upstream,
    headers: dict[str, str],
    stream: bool,
) -> Response:
    if stream and r.status_code < 400 and up.is_event_stream(r):
        return Streamed(
            relay(exchange, r, upstream),
            r.status_code,
            up.response_headers(r) | headers | exchange.timing_header(),
            media_type="text/event-stream",
        )
    with exchange.timing.span("answer"):
        await unless_gone(request, exchange, read_checked(r, exchange, upstream, stream))
        content = await unless_gone(request, exchange, exchange.settle(r))
    return Response(
        content, r.status_code, up.response_headers(r) | headers | exchange.timing_header()
    )


class Recorded(Response):
    """An answer, then its record: the client's bytes go first, and the record is written
    however sending them ends (a client gone, a cancelled task). A crash in between leaves the
    exchange open, as one mid-stream does: the next start closes it (store/liveness.py)."""

    def __init__(self, answer: Response, exchange: Exchange) -> None:  # the answer's body
        self.answer, self.exchange = answer, exchange
        self.status_code, self.background = answer.status_code, None
        self.raw_headers = answer.raw_headers

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await self.answer(scope, receive, send)
        finally:
            with anyio.CancelScope(shield=True):
                await self.exchange.flush()


async def _send_fitted(
    request: Request,
    exchange: Exchange,
    upstream: Upstream,
    send: Callable[..., Awaitable[httpx.Response]],
    bodies: tuple[dict[str, Any], dict[str, Any]],
    compiled: Compiled,
) -> tuple[httpx.Response, Compiled]:
    """Forward the view; an upstream that counts it over its window gets one refit view."""
    sendable, counted = bodies
    timing = exchange.timing
    outgoing = exchange.outgoing(upstream, sendable, counted, compiled)
    with timing.span("upstream"):
        sent = exchange.alongside(send(upstream, outgoing, compiled))
        r = await unless_gone(request, exchange, sent)
        overflow = await overflow_of(r, exchange, upstream)
    if not overflow or compiled.budget is None:
        return r, compiled
    # The upstream counted more than we estimated: learn from its figures, refit, retry once.
    with timing.span("compile"):
        compiled = await exchange.refit(counted, compiled, overflow)
    outgoing = exchange.outgoing(upstream, sendable, counted, compiled)
    with timing.span("upstream"):
        r = await unless_gone(request, exchange, send(upstream, outgoing, compiled))
        again = await overflow_of(r, exchange, upstream)
    if again:
        exc = ContextLengthExceeded(
            again.prompt_tokens or compiled.tokens_compiled,
            compiled.prompt_budget or 0,
            again.window or compiled.window,
        )
        await exchange.finish(status=exc.status, error=exc.body()["error"])
        raise exc
    return r, compiled
