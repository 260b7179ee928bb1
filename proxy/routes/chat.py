"""POST /v1/chat/completions: identify, store, compile the view, forward, relay, record."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Any

import anyio
import httpx
from fastapi import APIRouter, Request, Response
from fastapi.responses import StreamingResponse
from starlette.concurrency import run_in_threadpool

from proxy import upstream as up
from proxy.compiler import Compiled, compile_request
from proxy.deps import ClientAuth, JsonBody, ServicesDep
from proxy.errors import ContextLengthExceeded, ModelNotFound, ProxyError
from proxy.protocol import parse_chat
from proxy.sessions import identify
from proxy.sse import StreamAssembler
from proxy.store import RequestRef

router = APIRouter(dependencies=[ClientAuth])


@router.post("/v1/chat/completions")
@router.post("/s/{session}/v1/chat/completions", include_in_schema=False)
async def chat_completions(
    request: Request, body: JsonBody, services: ServicesDep, session: str | None = None
) -> Response:
    turn = Turn(services, time.monotonic())
    chat = parse_chat(body)
    upstream = services.settings.upstream_for(chat.model)
    if upstream is None:
        raise ModelNotFound(chat.model)
    key = identify(request.headers.get("x-session-id"), session, body)
    window = await services.windows.window(upstream, chat.model)
    try:
        compiled = compile_request(
            body, window=window, settings=services.settings.compaction, counter=services.counter
        )
    except ContextLengthExceeded as exc:
        await turn.record(key, body, upstream.name, None)
        await turn.finish(status=exc.status, error=exc.body()["error"])
        raise
    await turn.record(key, body, upstream.name, compiled)
    headers = compilation_headers(compiled) | {"x-ctxproxy-session": key.id}
    outgoing = {**body, "messages": compiled.messages}
    if upstream.kind == "ollama" and window:
        # Ollama silently truncates to its num_ctx: make it the window we compiled for.
        outgoing["options"] = {"num_ctx": window, **(body.get("options") or {})}
    try:
        r = await up.send(
            services.client,
            upstream,
            "POST",
            "/chat/completions",
            json=outgoing,
            stream=bool(chat.stream),
        )
    except ProxyError as exc:
        await turn.finish(status=exc.status, error=exc.body()["error"])
        raise
    if chat.stream and r.status_code < 400 and _is_event_stream(r):
        return StreamingResponse(
            turn.relay(r, upstream),
            r.status_code,
            up.response_headers(r) | headers,
            media_type="text/event-stream",
        )
    await r.aread()
    await r.aclose()
    await turn.finish_from_json(r)
    return Response(r.content, r.status_code, up.response_headers(r) | headers)


class Turn:
    """One exchange's record: written before forwarding, completed when the answer ends."""

    def __init__(self, services: Any, started: float):
        self.store = services.store
        self.pipeline = list(services.settings.compaction.pipeline)
        self.started = started
        self.ref: RequestRef | None = None

    async def record(
        self, key: Any, body: dict[str, Any], upstream: str, compiled: Compiled | None
    ) -> None:
        self.ref = await run_in_threadpool(
            self.store.record_request,
            key.id,
            source=key.source,
            messages=body["messages"],
            request={k: v for k, v in body.items() if k != "messages"},
            model=body["model"],
            upstream=upstream,
            stream=bool(body.get("stream")),
            compiled=compiled.messages if compiled else [],
            tokens_original=compiled.tokens_original if compiled else 0,
            tokens_compiled=compiled.tokens_compiled if compiled else 0,
            budget=compiled.budget if compiled else None,
            window=compiled.window if compiled else None,
            pipeline=self.pipeline,
            events=[e.to_dict() for e in compiled.events] if compiled else [],
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
    ) -> None:
        if self.ref is None:
            return
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
        )

    async def finish_from_json(self, r: httpx.Response) -> None:
        try:
            data = r.json()
        except ValueError:
            data = None
        data = data if isinstance(data, dict) else {}
        choices = data.get("choices") or [{}]
        message = choices[0].get("message") if isinstance(choices[0], dict) else None
        error = data.get("error") if r.status_code >= 400 else None
        await self.finish(
            status=r.status_code,
            response=message,
            usage=data.get("usage"),
            error=error if isinstance(error, dict) else None,
        )

    async def relay(self, r: httpx.Response, upstream: Any) -> AsyncIterator[bytes]:
        answer, first = StreamAssembler(), None
        try:
            async for chunk in up.relay(r, upstream):
                first = first or time.monotonic()
                answer.feed(chunk)
                yield chunk
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
                )


def _is_event_stream(r: httpx.Response) -> bool:
    return "text/event-stream" in r.headers.get("content-type", "")


def compilation_headers(compiled: Compiled) -> dict[str, str]:
    return {
        "x-ctxproxy-tokens-original": str(compiled.tokens_original),
        "x-ctxproxy-tokens-compiled": str(compiled.tokens_compiled),
        "x-ctxproxy-budget": "" if compiled.budget is None else str(compiled.budget),
        "x-ctxproxy-compaction": compiled.summary(),
    }
