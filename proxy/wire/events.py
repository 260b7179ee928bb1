"""Server-sent events for the converters: reading them as they pass, writing them, and relaying
a native stream while the answer is assembled for the audit record."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Callable
from contextlib import aclosing
from typing import Any, Protocol

import anyio
import httpx

from proxy import upstream as up
from proxy.errors import ProxyError, UpstreamInvalid
from proxy.relay import sse_end


def event(name: str, data: dict[str, Any]) -> bytes:
    return f"event: {name}\ndata: {json.dumps(data)}\n\n".encode()


class Reader:
    """Feed bytes; get back the (event name, data) of each event that ended."""

    def __init__(self) -> None:
        self._buffer = b""

    def feed(self, chunk: bytes) -> list[tuple[str | None, str]]:
        self._buffer += chunk.replace(b"\r\n", b"\n")
        *whole, self._buffer = self._buffer.split(b"\n\n")
        return [parsed for block in whole if (parsed := _parse(block)) is not None]

    def close(self) -> list[tuple[str | None, str]]:
        rest, self._buffer = self._buffer, b""
        parsed = _parse(rest)
        return [parsed] if parsed is not None else []


def _parse(block: bytes) -> tuple[str | None, str] | None:
    name, data = None, []
    for line in block.decode(errors="replace").split("\n"):
        field, _, value = line.partition(":")
        value = value[1:] if value.startswith(" ") else value
        if field == "event":
            name = value
        elif field == "data":
            data.append(value)
    return (name, "\n".join(data)) if data else None


def loads(data: str) -> dict[str, Any] | None:
    try:
        value = json.loads(data)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


class Assembler(Protocol):
    our_id: str  # the answer's id in ctxproxy's scheme, where the API's ids are ours
    done: bool
    error: dict[str, Any] | None
    usage: dict[str, Any] | None

    def feed(self, chunk: bytes) -> None: ...
    def message(self) -> dict[str, Any]: ...
    def renamed(self, chunk: bytes) -> bytes: ...


async def relay_native(
    turn: Any,
    r: httpx.Response,
    upstream: Any,
    answer: Assembler,
    error_event: Callable[[ProxyError], bytes],
) -> AsyncIterator[bytes]:
    """The upstream's own events as they come, whole; its answer recorded when they end."""
    first, held = None, b""
    try:
        async with aclosing(up.relay_parts(r, upstream)) as parts:
            async for part in parts:
                if isinstance(part, ProxyError):  # an event it cut off is dropped
                    answer.error = part.body()["error"]
                    yield error_event(part)
                    break
                first = first or time.monotonic()
                held += part
                cut = sse_end(held)
                ready, held = held[:cut], held[cut:]
                if ready:
                    answer.feed(ready)
                    yield answer.renamed(ready)
        if held and answer.error is None:
            answer.feed(held + b"\n\n")
            yield answer.renamed(held + b"\n\n")
        if not answer.done and answer.error is None:
            exc = UpstreamInvalid(f"Upstream '{upstream.name}' ended its stream unfinished")
            answer.error = exc.body()["error"]
            yield error_event(exc)
    finally:
        with anyio.CancelScope(shield=True):
            await turn.finish(
                status=r.status_code,
                response=answer.message(),
                usage=answer.usage,
                partial=not answer.done or answer.error is not None,
                error=answer.error,
                first=first,
            )
