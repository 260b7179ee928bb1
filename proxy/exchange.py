"""The exchange lifecycle: identify, store, compile the view, forward, relay, record.

Routes parse their API's request and call `run`; this module knows the neutral
(OpenAI chat) form only."""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import AsyncIterator, Awaitable
from contextlib import aclosing
from functools import partial
from typing import Any, TypeVar

import anyio
import httpx
from fastapi import Request, Response
from fastapi.responses import StreamingResponse
from starlette.concurrency import run_in_threadpool

from proxy import answers, observe
from proxy import upstream as up
from proxy.calibration import exact_prompt_tokens, next_factor
from proxy.compiler import Compiled, compile_request, message_budget
from proxy.deps import client_key_id
from proxy.disconnect import ClientClosed, unless_disconnected
from proxy.errors import (
    ContextLengthExceeded,
    ModelNotFound,
    ProxyError,
    UpstreamInvalid,
    sse_error,
)
from proxy.overflow import Overflow, parse_overflow
from proxy.prepare import prepare
from proxy.progress import Progress
from proxy.sessions import identify
from proxy.sse import MAX_CHOICES, StreamAssembler
from proxy.store import RequestRef
from proxy.store.states import Decisions, Prior
from proxy.store.store import hash_messages

log = logging.getLogger("ctxproxy.exchange")
T = TypeVar("T")


async def run(
    request: Request, body: dict[str, Any], services: Any, session: str | None
) -> Response:
    """One chat exchange: identify, store, compile the view, forward, relay, record."""
    started = time.monotonic()
    # The wire shape checked; `sendable` is what is compiled and sent (repaired, if the policy
    # says so), while `body` stays the raw request, stored as the client sent it.
    chat, sendable = await prepare(body, services.settings.compaction.invalid_pairing)
    upstream = services.settings.upstream_for(chat.model)
    if upstream is None:
        raise ModelNotFound(chat.model)
    turn = Turn(services, started, upstream.name, chat.model)
    owner = client_key_id(request, services)
    key = identify(request.headers.get("x-session-id"), session, body, owner)
    window = await services.windows.window(upstream, chat.model)
    await turn.load_prior(key.id, body, sendable)
    factor = turn.session_factor(services.calibration.factor(upstream.name, chat.model))
    try:
        compiled = await turn.fit(upstream, sendable, window, factor)
    except ContextLengthExceeded as exc:
        await turn.record(key, body, upstream.name, None, refused=exc)
        await turn.finish(status=exc.status, error=exc.body()["error"])
        raise
    await turn.record(key, body, upstream.name, compiled)
    r = await _unless_gone(request, turn, turn.forward(upstream, sendable, compiled))
    overflow = await _overflow_of(r, turn, upstream)
    if overflow and compiled.budget is not None:
        # The upstream counted more than we estimated: learn from its figures, refit, retry once.
        compiled = await turn.refit(sendable, compiled, overflow)
        r = await _unless_gone(request, turn, turn.forward(upstream, sendable, compiled))
        if again := await _overflow_of(r, turn, upstream):
            exc = ContextLengthExceeded(
                again.prompt_tokens or compiled.tokens_compiled,
                compiled.budget or 0,
                again.window or compiled.window,
            )
            await turn.finish(status=exc.status, error=exc.body()["error"])
            raise exc
    headers = compilation_headers(compiled) | {"x-ctxproxy-session": key.id}
    if chat.stream and r.status_code < 400 and up.is_event_stream(r):
        return StreamingResponse(
            turn.relay(r, upstream),
            r.status_code,
            up.response_headers(r) | headers,
            media_type="text/event-stream",
        )
    await _unless_gone(request, turn, _read_checked(r, turn, upstream, bool(chat.stream)))
    await turn.finish_from_json(r)
    return Response(r.content, r.status_code, up.response_headers(r) | headers)


async def _unless_gone(request: Request, turn: Turn, work: Awaitable[T]) -> T:
    """`work`, given up when the client disconnects: the upstream request is cancelled too."""
    try:
        return await unless_disconnected(request, work)
    except ClientClosed as exc:
        with anyio.CancelScope(shield=True):
            await turn.finish(status=exc.status, error=exc.body()["error"])
        raise


async def _read_checked(r: httpx.Response, turn: Turn, upstream: Any, stream: bool) -> None:
    """Read the whole answer; one cut short, stalled or not a completion closes the record."""
    try:
        await up.read(r, upstream)
        answers.check(r, upstream.name, stream)
    except ProxyError as exc:
        await turn.finish(status=exc.status, error=exc.body()["error"])
        raise


async def _overflow_of(r: httpx.Response, turn: Turn, upstream: Any) -> Overflow | None:
    if r.status_code < 400:
        return None
    await _read_checked(r, turn, upstream, False)
    return parse_overflow(r.status_code, r.content)


class Turn:
    """One exchange's record: written before forwarding, completed when the answer ends."""

    def __init__(self, services: Any, started: float, upstream: str, model: str):
        self.services = services
        self.upstream, self.model = upstream, model
        self.store = services.store
        self.pipeline = list(services.settings.compaction.pipeline)
        self.started = started
        self.ref: RequestRef | None = None
        self.factor = 1.0
        self.compiled: Compiled | None = None
        self.sent: Compiled | None = None  # the view as recorded, for metrics and the log
        self.messages: list[dict[str, Any]] = []  # as stored: a refit's view refers to it
        self.stream = False
        self.attempts: list[dict[str, Any]] = []
        self.hashes: list[str] | None = None
        self.prior: Prior | None = None

    async def load_prior(self, session_id: str, body: dict[str, Any], sendable: dict) -> None:
        """The session branch's stored compaction state, which this turn's view starts from."""
        fresh = sendable["messages"] is not body["messages"]  # a repaired history compiles afresh
        self.hashes, self.prior = await run_in_threadpool(
            self._hash_and_load, session_id, body["messages"], fresh
        )

    def _hash_and_load(
        self, session_id: str, messages: list[dict[str, Any]], fresh: bool
    ) -> tuple[list[str], Prior | None]:
        hashes = hash_messages(messages)  # one thread hop for both: each costs a loop turn
        return hashes, None if fresh else self.store.load_state(session_id, hashes)

    def session_factor(self, default: float) -> float:
        """The session's own calibration, moved by what the upstream counted last turn."""
        p = self.prior
        return default if p is None else next_factor(p.factor, p.raw_prompt, p.prompt_tokens)

    async def compile(self, body: dict[str, Any], window: int | None, factor: float) -> Compiled:
        """Off the event loop: a long history's first compile can take a while."""
        self.factor = factor
        compiled = await run_in_threadpool(
            partial(
                compile_request,
                body,
                window=window,
                settings=self.services.settings.compaction,
                counter=self.services.counter.corrected(factor),
                prior=self.prior.state if self.prior else None,
            )
        )
        if self.prior is not None and compiled.tokens_original < self.prior.tokens_original:
            # The history only grew: a lower calibration since must not make it look smaller.
            compiled = dataclasses.replace(compiled, tokens_original=self.prior.tokens_original)
        self.compiled = compiled
        return compiled

    def decisions(self, compiled: Compiled) -> Decisions | None:
        if compiled.state is None:
            return None
        return Decisions(
            compiled.state, compiled.factor, compiled.raw_prompt, compiled.tokens_original
        )

    async def fit(
        self, upstream: Any, body: dict[str, Any], window: int | None, factor: float
    ) -> Compiled:
        """Compile; in exact mode, recount with the upstream's tokenizer and refit if needed."""
        compiled = await self.compile(body, window, factor)
        if upstream.tokenizer != "upstream" or window is None:
            return compiled
        limit = message_budget(body, window, self.services.settings.compaction, 0)
        for attempt in range(3):
            outgoing = {**body, "messages": compiled.messages}
            try:
                exact = await exact_prompt_tokens(self.services.client, upstream, outgoing)
            except (httpx.HTTPError, KeyError, ValueError, TypeError) as exc:
                log.warning("exact count on %s failed, estimating: %r", upstream.name, exc)
                return compiled
            if exact is None:
                return compiled
            self.calibrate(compiled, exact)
            if exact <= limit or attempt == 2:
                return dataclasses.replace(compiled, tokens_compiled=exact)
            compiled = await self.compile(
                body, window, self.factor * exact / compiled.tokens_compiled
            )
        return compiled

    async def forward(
        self, upstream: Any, body: dict[str, Any], compiled: Compiled
    ) -> httpx.Response:
        outgoing = {**body, "messages": compiled.messages}
        options = body.get("options")
        if upstream.kind == "ollama" and compiled.window and isinstance(options, dict | None):
            # Ollama silently truncates to its num_ctx: make it the window we compiled for.
            outgoing["options"] = {"num_ctx": compiled.window, **(options or {})}
        try:
            return await up.send(
                self.services.client,
                upstream,
                "POST",
                "/chat/completions",
                json=outgoing,
                stream=True,  # read by the route, within max_response_bytes
            )
        except ProxyError as exc:
            await self.finish(status=exc.status, error=exc.body()["error"])
            raise

    async def refit(self, body: dict[str, Any], first: Compiled, overflow: Overflow) -> Compiled:
        self.attempts.append(
            {
                "tokens_compiled": first.tokens_compiled,
                "budget": first.budget,
                "window": first.window,
                "factor": self.factor,
                "upstream_prompt_tokens": overflow.prompt_tokens,
                "upstream_window": overflow.window,
            }
        )
        factor = self.factor * 1.25
        estimated = self.compiled or first  # the estimate, also where `first` is an exact count
        if overflow.prompt_tokens and estimated.tokens_compiled:
            self.calibrate(estimated, overflow.prompt_tokens)
            factor = self.factor * overflow.prompt_tokens / estimated.tokens_compiled * 1.02
        window = min(w for w in (first.window, overflow.window) if w)
        try:
            compiled = await self.compile(body, window, factor)
        except ContextLengthExceeded as exc:
            await self.finish(status=exc.status, error=exc.body()["error"])
            raise
        self.sent = compiled
        if self.ref is not None:
            await run_in_threadpool(
                self.store.replace_compiled,
                self.ref,
                self.messages,
                compiled.messages,
                tokens_compiled=compiled.tokens_compiled,
                budget=compiled.budget,
                window=compiled.window,
                events=[e.to_dict() for e in compiled.events],
                decided=self.decisions(compiled),
            )
        return compiled

    def calibrate(self, compiled: Compiled, prompt_tokens: Any) -> None:
        """Teach the calibration what the upstream counted for what we estimated."""
        self.services.calibration.observe(
            self.upstream, self.model, compiled.raw_prompt, prompt_tokens
        )

    async def record(
        self,
        key: Any,
        body: dict[str, Any],
        upstream: str,
        compiled: Compiled | None,
        refused: ContextLengthExceeded | None = None,
    ) -> None:
        self.sent, self.messages = compiled, body["messages"]
        self.stream = bool(body.get("stream"))
        if refused is not None:  # nothing is sent; keep what it needed against which budget
            counter = self.services.counter.corrected(self.factor)
            settings = self.services.settings.compaction
            whole = await run_in_threadpool(
                compile_request, body, window=None, settings=settings, counter=counter
            )
            compiled = Compiled(
                [], whole.tokens_original, refused.needed, refused.budget, refused.window
            )
        self.ref = await run_in_threadpool(
            self.store.record_request,
            key.id,
            source=key.source,
            key_id=key.owner,
            messages=body["messages"],
            request={k: v for k, v in body.items() if k != "messages"},
            model=body["model"],
            upstream=upstream,
            stream=self.stream,
            compiled=compiled.messages if compiled else [],
            tokens_original=compiled.tokens_original if compiled else 0,
            tokens_compiled=compiled.tokens_compiled if compiled else 0,
            budget=compiled.budget if compiled else None,
            window=compiled.window if compiled else None,
            pipeline=self.pipeline,
            events=[e.to_dict() for e in compiled.events] if compiled else [],
            decided=self.decisions(compiled) if compiled else None,
            hashes=self.hashes,
        )

    async def finish(
        self,
        *,
        status: int,
        response: dict[str, Any] | None = None,
        partial: bool = False,
        usage: dict[str, Any] | None = None,
        error: dict[str, Any] | None = None,
        first: float | None = None,
        choices: list[dict[str, Any]] | None = None,
    ) -> None:
        if self.ref is None:
            return
        if isinstance(usage, dict) and self.compiled is not None and status < 400:
            self.calibrate(self.compiled, usage.get("prompt_tokens"))
        now = time.monotonic()
        await run_in_threadpool(
            self.store.finish_exchange,
            self.ref,
            status=status,
            latency_ms=(now - self.started) * 1000,
            ttft_ms=None if first is None else (first - self.started) * 1000,
            response=response,
            partial=partial,
            usage=usage,
            error=error,
            attempts=self.attempts or None,
            choices=choices,
        )
        observe.exchange_finished(self, status, now, first, response, partial, error)

    async def finish_from_json(self, r: httpx.Response) -> None:
        try:
            data = r.json()
        except ValueError:
            data = None
        data = data if isinstance(data, dict) else {}
        choices = data.get("choices") or [{}]
        message = choices[0].get("message") if isinstance(choices[0], dict) else None
        error = data.get("error") if r.status_code >= 400 else None
        others = [c.get("message") for c in choices[1:MAX_CHOICES] if isinstance(c, dict)]
        await self.finish(
            status=r.status_code,
            response=message,
            usage=data.get("usage"),
            error=error if isinstance(error, dict) else None,
            choices=others or None,
        )

    async def relay(self, r: httpx.Response, upstream: Any) -> AsyncIterator[bytes]:
        """Relay whole events as they come: a cut-off event is never followed by our own."""
        answer, first, held = StreamAssembler(), None, b""
        progress = Progress(self.store, self.ref)
        try:
            async with aclosing(up.relay_parts(r, upstream)) as parts:
                async for part in parts:
                    if isinstance(part, ProxyError):  # an event it cut off is dropped
                        answer.error, held = part.body()["error"], b""
                        yield sse_error(part)
                        break
                    first = first or time.monotonic()
                    held += part
                    cut = sse_end(held)
                    ready, held = held[:cut], held[cut:]
                    if ready and (chunk := await self.relayed(ready, answer, progress, upstream)):
                        yield chunk
                    if answer.malformed is not None:
                        break
            if held and answer.malformed is None:  # the last event, without its blank line
                yield await self.relayed(held, answer, progress, upstream)
            if not answer.done and answer.malformed is None and answer.error is None:
                yield end_unfinished(answer, upstream.name)
        finally:
            # Runs on a client disconnect too, where the task is being cancelled: shield the
            # write so the partial answer is still recorded.
            with anyio.CancelScope(shield=True):
                await self.finish(
                    status=r.status_code,
                    response=answer.message(),
                    usage=answer.usage,
                    partial=not answer.done or answer.error is not None,
                    error=answer.error,
                    first=first,
                    choices=answer.other_messages(),
                )

    async def relayed(
        self, chunk: bytes, answer: StreamAssembler, progress: Progress, upstream: Any
    ) -> bytes:
        answer.feed(chunk)
        if answer.malformed is not None:
            return end_malformed(chunk, answer, upstream.name)
        await progress.saw(answer)  # before the client sees it: a kill loses none
        return chunk


def sse_end(data: bytes) -> int:
    """Where the last whole event in `data` ends (0 when none has ended yet)."""
    ends = ((data.rfind(sep), len(sep)) for sep in (b"\n\n", b"\r\n\r\n"))
    return max((at + size for at, size in ends if at >= 0), default=0)


def end_malformed(chunk: bytes, answer: StreamAssembler, upstream: str) -> bytes:
    """A chunk holding the first line that is not OpenAI's SSE: relay the events before it,
    then end the stream with an error rather than hand the client bytes it cannot parse."""
    bad = answer.malformed or b""
    exc = UpstreamInvalid(f"Upstream '{upstream}' sent a malformed event stream: {bad[:80]!r}")
    answer.error = exc.body()["error"]
    cut = chunk.find(bad) if bad else -1
    return (chunk[:cut] if cut > 0 else b"") + sse_error(exc)


def end_unfinished(answer: StreamAssembler, upstream: str) -> bytes:
    """The end of a stream the upstream closed without `data: [DONE]`: the client must not
    take a cut answer for a whole one."""
    exc = UpstreamInvalid(f"Upstream '{upstream}' ended its event stream without [DONE]")
    answer.error = exc.body()["error"]
    return b"\n\n" + sse_error(exc)


def compilation_headers(compiled: Compiled) -> dict[str, str]:
    return {
        "x-ctxproxy-tokens-original": str(compiled.tokens_original),
        "x-ctxproxy-tokens-compiled": str(compiled.tokens_compiled),
        "x-ctxproxy-budget": "" if compiled.budget is None else str(compiled.budget),
        "x-ctxproxy-compaction": compiled.summary(),
    }
