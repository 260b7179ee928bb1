"""How an exchange that came in on Messages or Responses goes upstream and comes back:
natively where the upstream serves that API (falling back on a 404), else translated to
chat completions and the answer translated back, streams included."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, replace
from typing import Any

import httpx
import orjson
from fastapi import Request, Response
from fastapi.responses import JSONResponse

from proxy.compile.view import Compiled
from proxy.errors import ProxyError, UpstreamInvalid
from proxy.exchange import guards, steps
from proxy.exchange.disconnect import Streamed
from proxy.exchange.privacy import without_identity
from proxy.exchange.relay import relay, relay_native
from proxy.formats.events import Assembler
from proxy.formats.groups import Conversion
from proxy.formats.reminders import fold
from proxy.formats.toolnames import REMOVED_KEY
from proxy.sessions.identify import SessionKey
from proxy.settings import Upstream
from proxy.upstream import send as up
from strategies.messages import orjson_exact

API_KEY = "ctxproxy_api"  # in the stored request: which API the exchange came in on
PRIVATE = "ctxproxy_"  # keys of the stored request that are never forwarded
PASSED_HEADERS = ("anthropic-version", "anthropic-beta")
FOLDED = ":folded"  # in Wire.fallbacks: this upstream refused mid-conversation system messages
REFUSED = (400, 422, 500)  # how templates that raise on them answer (llama.cpp, vLLM)
LIMIT_KEYS = {"messages": "max_tokens", "responses": "max_output_tokens"}  # the answer's length


@dataclass(frozen=True)
class Codec:
    """One API's converters, as the forwarding needs them."""

    api: str
    path: str  # the native path under the upstream's base URL
    from_view: Callable[[list[dict[str, Any]], Conversion], dict[str, Any]]
    from_completion: Callable[[dict[str, Any], str, Conversion], dict[str, Any]]
    translate: Callable[[AsyncIterator[bytes], str, int, Conversion], AsyncIterator[bytes]]
    assembler: Callable[[], Assembler]
    is_answer: Callable[[Any], bool]
    neutral_answer: Callable[[dict[str, Any]], dict[str, Any]]
    usage_to_openai: Callable[[Any], dict[str, Any] | None]
    upstream_error: Callable[[int, bytes], dict[str, Any]]
    error_event: Callable[[ProxyError], bytes]
    # An answer's id: its record, the ids' key, whether its client was told its session.
    answer_id: Callable[[Any, bytes, bool], str] | None = None


class Wire:
    """Passed to exchange.run: forwards the compiled view and renders the answer."""

    def __init__(self, codec: Codec, conversion: Conversion, request: Request, fallbacks: set):
        self.codec, self.conversion = codec, conversion
        self.headers = {h: request.headers[h] for h in PASSED_HEADERS if h in request.headers}
        self.fallbacks = fallbacks  # (upstream, api) pairs that answered 404 natively
        self.native = False
        # The session a Responses previous_response_id named, its history carried from the store
        # (told as the exchange it ended was); whether this exchange's client is told its own.
        self.continued: SessionKey | None = None
        self.told = True
        self.passed = False  # observed: the client's own bytes went to the upstream's own API

    def session(self, key: SessionKey) -> SessionKey:
        """The session: one the client named itself, else the one its previous_response_id
        continues, else `key` (found by its body or fingerprint)."""
        if self.continued is None or key.source in ("header", "path"):
            return key
        return self.continued

    def body(self) -> dict[str, Any]:
        return {**self.conversion.body, API_KEY: self.codec.api}

    def serves_natively(self, upstream: Upstream) -> bool:
        known = (upstream.name, self.codec.api) not in self.fallbacks
        return known and upstream.native(self.codec.api)

    async def forward(
        self,
        exchange: steps.Exchange,
        upstream: Upstream,
        body: dict[str, Any],
        compiled: Compiled,
    ) -> httpx.Response:
        # A view with anything folded goes translated, where ctxproxy can offer and answer
        # ctxproxy_recall (recall.translate); it stays folded, so a session switches once.
        recalling = exchange.rounds is not None and exchange.services.settings.recall.translate
        self.native = self.serves_natively(upstream) and not recalling
        if self.native:
            exchange.rounds = None  # the recall tool goes only with translated exchanges
            r = await self._send_native(exchange, upstream, compiled)
            if r.status_code not in (404, 405):
                return r
            await r.aclose()  # not served there after all: translate from now on
            self.fallbacks.add((upstream.name, self.codec.api))
            self.native = False
        return await self.translated(exchange, upstream, body, compiled)

    async def translated(
        self,
        exchange: steps.Exchange,
        upstream: Upstream,
        body: dict[str, Any],
        compiled: Compiled,
    ) -> httpx.Response:
        """The view sent as chat completions, the answer to be translated back."""
        chat = {k: v for k, v in body.items() if not k.startswith(PRIVATE)}
        exchange.tools_removed = body.get(REMOVED_KEY) or []
        # Chat templates refuse a system message after the first: carry it in a user exchange.
        folded = replace(compiled, messages=fold(compiled.messages))
        if exchange.rounds is not None:  # recall rounds ask again with the same view
            exchange.rounds.compiled = folded
        return await exchange.forward(upstream, chat, folded)

    async def _send_native(
        self, exchange: steps.Exchange, upstream: Upstream, compiled: Compiled
    ) -> httpx.Response:
        """The view in the API's own form; system messages after the first go as they came
        unless this upstream refused them once (then, and from then on, folded)."""
        view = compiled.messages
        folding = (upstream.name, self.codec.api + FOLDED)
        folded = fold(view)  # the same list when there is nothing to fold
        window = compiled.window
        first = folded if folding in self.fallbacks else view
        r = await self._post(exchange, upstream, first, window)
        if folded is not view and folding not in self.fallbacks and r.status_code in REFUSED:
            await r.aclose()
            r = await self._post(exchange, upstream, folded, window)
            if r.status_code < 400:
                self.fallbacks.add(folding)
        return r

    async def _post(
        self,
        exchange: steps.Exchange,
        upstream: Upstream,
        view: list[dict[str, Any]],
        window: int | None,
    ) -> httpx.Response:
        outgoing = self._limited(self.codec.from_view(view, self.conversion), exchange.limit)
        if not exchange.services.settings.forward_client_identity:
            outgoing = without_identity(outgoing)
        try:
            return await up.ask(
                exchange.services.client,
                upstream,
                self.codec.path,
                outgoing,
                window=window,
                headers=self.headers,
            )
        except ProxyError as exc:
            await exchange.finish(status=exc.status, error=exc.body()["error"])
            raise

    async def answer(
        self,
        request: Request,
        exchange: steps.Exchange,
        r: httpx.Response,
        upstream: Upstream,
        headers: dict[str, str],
        stream: bool,
    ) -> Response:
        headers = {**up.response_headers(r), **headers}
        headers.pop("content-type", None)
        # An observed answer from the upstream's own API keeps the upstream's id, which the
        # client's next request names to it (previous_response_id) byte for byte.
        if exchange.ref is not None and self.codec.answer_id is not None and not self.passed:
            ids_key = exchange.store.ids_key()
            self.conversion.answer_id = self.codec.answer_id(exchange.ref, ids_key, self.told)
        if stream and r.status_code < 400 and up.is_event_stream(r):
            headers |= exchange.timing_header()
            return Streamed(
                self._stream(exchange, r, upstream), r.status_code, headers, "text/event-stream"
            )
        with exchange.timing.span("answer"):
            response = await self._whole(request, exchange, r, upstream, headers, stream)
        response.headers.update(exchange.timing_header())
        return response

    async def _whole(
        self,
        request: Request,
        exchange: steps.Exchange,
        r: httpx.Response,
        upstream: Upstream,
        headers: dict[str, str],
        stream: bool,
    ) -> Response:
        """The answer read whole (recall rounds answered) and rendered in the client's API."""
        if not self.native:
            await guards.unless_gone(
                request, exchange, guards.read_checked(r, exchange, upstream, stream)
            )
            content = await guards.unless_gone(request, exchange, exchange.settle(r))
            if r.status_code >= 400:
                return self._error(r, headers)
            completion = json.loads(content)  # recall rounds answered, their calls taken out
            answer = self.codec.from_completion(completion, exchange.model, self.conversion)
            return _json_response(answer, r.status_code, headers)
        read = self._read_native(r, exchange, upstream)
        data = await guards.unless_gone(request, exchange, read)
        if r.status_code >= 400:
            await exchange.finish(status=r.status_code, error=self._error_of(r))
            return self._error(r, headers)
        return Response(
            self._named(r.content, data), r.status_code, headers, media_type="application/json"
        )

    def _limited(self, native: dict[str, Any], limit: int | None) -> dict[str, Any]:
        """The native request asking no more than fits the window (see Exchange.outgoing)."""
        key = LIMIT_KEYS.get(self.codec.api)
        asked = native.get(key) if key else None
        if key and limit is not None and isinstance(asked, int) and asked > limit:
            return {**native, key: limit}
        return native

    def _named(self, content: bytes, data: Any) -> bytes:
        """A native answer (`data`: its content parsed) under ctxproxy's id where the API's ids
        are ours (Responses': so that previous_response_id finds it in the store)."""
        if not self.conversion.answer_id or not isinstance(data, dict):
            return content
        return json.dumps({**data, "id": self.conversion.answer_id}).encode()

    def _stream(
        self, exchange: steps.Exchange, r: httpx.Response, upstream: Upstream
    ) -> AsyncIterator[bytes]:
        if self.native:
            answer = self.codec.assembler()
            answer.our_id = self.conversion.answer_id
            return relay_native(exchange, r, upstream, answer, self.codec.error_event)
        estimate = exchange.sent.tokens_compiled if exchange.sent else 0
        chat = relay(exchange, r, upstream)
        return self.codec.translate(chat, exchange.model, estimate, self.conversion)

    async def _read_native(
        self, r: httpx.Response, exchange: steps.Exchange, upstream: Upstream
    ) -> Any:
        """The answer read whole, checked and recorded: its content parsed (None if no JSON)."""
        try:
            await up.read(r, upstream)
            data = _json(r.content)
            if r.status_code < 400 and not self.codec.is_answer(data):
                raise UpstreamInvalid(
                    f"Upstream '{upstream.name}' answered {self.codec.path} with something "
                    f"that is not an answer ({len(r.content)} bytes)"
                )
        except ProxyError as exc:
            await exchange.finish(status=exc.status, error=exc.body()["error"])
            raise
        if r.status_code < 400:
            await exchange.finish(
                status=r.status_code,
                response=self.codec.neutral_answer(data),
                usage=self.codec.usage_to_openai(data.get("usage")),
            )
        return data

    def _error_of(self, r: httpx.Response) -> dict[str, Any]:
        return self.codec.upstream_error(r.status_code, r.content)

    def _error(self, r: httpx.Response, headers: dict[str, str]) -> Response:
        return JSONResponse(self._error_of(r), r.status_code, headers)


def _json_response(content: Any, status: int, headers: dict[str, str]) -> Response:
    """JSONResponse's very bytes, made by orjson where it writes the same (no floats, 64-bit
    integers: strategies.messages.orjson_exact): a Responses answer echoes the request's
    instructions and tools (tens of KB from Codex), on which the standard encoder is slower."""
    if orjson_exact(content):
        try:
            return Response(orjson.dumps(content), status, headers, media_type="application/json")
        except orjson.JSONEncodeError:  # a lone surrogate: JSONResponse says what of it
            pass
    return JSONResponse(content, status, headers)


def _json(content: bytes) -> Any:
    try:
        return json.loads(content)
    except ValueError:
        return None
