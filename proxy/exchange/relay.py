"""A streamed answer relayed to the client event by event, recall rounds included, and recorded.

Whole events only: an event the upstream cut off is dropped, never followed by our own error
event. With the recall tool offered, each round's events go through a StreamFilter first, and
a round that ends in recall calls only is answered and followed by the next round's stream.
"""

from __future__ import annotations

import time
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from contextlib import aclosing
from typing import TYPE_CHECKING

import anyio
import httpx

from proxy.errors import ProxyError, UpstreamInvalid, sse_error
from proxy.exchange.progress import Progress
from proxy.exchange.recallstream import StreamFilter
from proxy.exchange.rounds import Rounds
from proxy.formats.chat_stream import StreamAssembler
from proxy.formats.events import Assembler
from proxy.settings import Upstream
from proxy.upstream import send as up

if TYPE_CHECKING:  # it imports this module
    from proxy.exchange.steps import Exchange


async def relay(exchange: Exchange, r: httpx.Response, upstream: Upstream) -> AsyncIterator[bytes]:
    """The client's stream; `exchange.finish` records the answer however the stream ends."""
    answer, first, status = StreamAssembler(), None, r.status_code
    progress = Progress(exchange.store, exchange.turn)
    rounds = exchange.rounds
    filt = StreamFilter(rounds.usages) if rounds is not None else None
    try:
        current: httpx.Response | None = r
        while current is not None:
            async for chunk in _round(current, upstream, answer, progress, filt, rounds):
                first = first or time.monotonic()
                yield chunk
            current = None
            if rounds is not None and filt is not None and filt.going_on and answer.error is None:
                try:
                    await rounds.answer(filt.message(), filt.recall_calls())
                    filt.start_round()
                    current = await rounds.send(stream=True)
                except ProxyError as exc:
                    answer.error = exc.body()["error"]
                    yield sse_error(exc)
        if not answer.done and answer.malformed is None and answer.error is None:
            yield end_unfinished(answer, upstream.name)
    finally:
        # Runs on a client disconnect too, where the task is being cancelled: shield the
        # write so the partial answer is still recorded.
        with anyio.CancelScope(shield=True):
            await exchange.finish(
                status=status,
                response=answer.message(),
                usage=answer.usage,
                partial=not answer.done or answer.error is not None,
                error=answer.error,
                first=first,
                choices=answer.other_messages(),
                timings=answer.timings,
            )


async def _round(
    r: httpx.Response,
    upstream: Upstream,
    answer: StreamAssembler,
    progress: Progress,
    filt: StreamFilter | None,
    rounds: Rounds | None,
) -> AsyncIterator[bytes]:
    """One upstream stream's events, as the client gets them."""
    async with aclosing(whole_events(r, upstream)) as events:
        async for ready in events:
            if isinstance(ready, ProxyError):  # an event it cut off is dropped
                answer.error = ready.body()["error"]
                yield sse_error(ready)
                return
            if filt is not None:
                ready = filt.feed(ready, rounds is not None and rounds.more)
            if ready:
                yield await _relayed(ready, answer, progress, upstream)
            if answer.malformed is not None:
                return


async def whole_events(
    r: httpx.Response, upstream: Upstream
) -> AsyncGenerator[bytes | ProxyError, None]:
    """The upstream's events, whole, as each ends; at the stream's end what is left (the last
    event without its blank line); or, instead of the event it cut off, the error that ended
    the stream early."""
    held = b""
    async with aclosing(up.body_parts(r, upstream)) as parts:
        async for part in parts:
            if isinstance(part, ProxyError):
                yield part
                return
            held += part
            if cut := sse_end(held):
                ready, held = held[:cut], held[cut:]
                yield ready
    if held:
        yield held


async def _relayed(
    chunk: bytes, answer: StreamAssembler, progress: Progress, upstream: Upstream
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


async def relay_native(
    exchange: Exchange,
    r: httpx.Response,
    upstream: Upstream,
    answer: Assembler,
    error_event: Callable[[ProxyError], bytes],
) -> AsyncIterator[bytes]:
    """The upstream's own events as they come, whole; its answer recorded when they end."""
    first = None
    try:
        async with aclosing(whole_events(r, upstream)) as events:
            async for ready in events:
                if isinstance(ready, ProxyError):  # an event it cut off is dropped
                    answer.error = ready.body()["error"]
                    yield error_event(ready)
                    break
                first = first or time.monotonic()
                if not ready.endswith((b"\n\n", b"\r\n\r\n")):  # the last, unended event
                    ready += b"\n\n"
                answer.feed(ready)
                yield answer.renamed(ready)
        if not answer.done and answer.error is None:
            exc = UpstreamInvalid(f"Upstream '{upstream.name}' ended its stream unfinished")
            answer.error = exc.body()["error"]
            yield error_event(exc)
    finally:
        with anyio.CancelScope(shield=True):
            await exchange.finish(
                status=r.status_code,
                response=answer.message(),
                usage=answer.usage,
                partial=not answer.done or answer.error is not None,
                error=answer.error,
                first=first,
            )
