"""httpx's own transport (httpcore's pool, h11's parser) with the checks that keep one request's
leftovers out of the next request's answer.

httpcore already drops an idle connection that has become readable (a late 408, a FIN) before it
reuses one, and never re-sends a request once any of it went out. What it lets through, and this
module stops: bytes already read past the end of an answer (a body longer than its length, a second
answer sent unasked) stay in h11's buffer and would be parsed as the next answer; a status outside
200-599 (999, a 101 nobody asked for) is handed on as if it were an answer; a message framed by
both Transfer-Encoding and Content-Length (a response-splitting tell) is read by one of them; and
a Transfer-Encoding other than plain chunked (`gzip, chunked`) would reach the client undecoded.
Each of these is a MalformedAnswer (a RemoteProtocolError); its connection is closed, never pooled.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import h11
import httpx


class MalformedAnswer(httpx.RemoteProtocolError):
    """An answer this module refused: the upstream, not the network, is at fault."""


class CheckedTransport(httpx.AsyncBaseTransport):
    def __init__(self, limits: httpx.Limits) -> None:
        self._inner = httpx.AsyncHTTPTransport(limits=limits)

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        response = await self._inner.handle_async_request(request)
        problem = head_problem(response)
        if problem:
            await discard(response)
            raise MalformedAnswer(problem, request=request)
        response.stream = _CheckedBody(response, request)
        return response

    async def aclose(self) -> None:
        await self._inner.aclose()


def head_problem(response: httpx.Response) -> str | None:
    if not 200 <= response.status_code <= 599:
        return f"the upstream answered with status {response.status_code}, not a final status"
    coding = response.headers.get("transfer-encoding")
    if coding is not None and "content-length" in response.headers:
        return "the upstream's answer has both Transfer-Encoding and Content-Length"
    if coding is not None and coding.strip().lower() != "chunked":
        # `gzip, chunked` would reach the client still gzipped, as if it were the answer
        return f"the upstream's answer has Transfer-Encoding {coding[:40]!r}, not plain chunked"
    return None


def h11_state(response: httpx.Response) -> Any:
    """h11's state machine for the response's connection (httpx → httpcore's pool stream →
    HTTP/1.1 stream → connection). These attributes are private: if an upgrade moves them, the
    faults that leave bytes behind in tests/e2e/test_upstream_faults.py fail."""
    pool_stream = getattr(response.stream, "_httpcore_stream", None)
    connection = getattr(getattr(pool_stream, "_stream", None), "_connection", None)
    return getattr(connection, "_h11_state", None)


def never_reuse(state: Any) -> None:
    """Mark the connection failed (h11's public send_failed): httpcore then closes it when the
    response is closed, instead of putting it back in the pool."""
    if state is not None and state.our_state not in (h11.ERROR, h11.CLOSED):
        state.send_failed()


async def discard(response: httpx.Response) -> None:
    never_reuse(h11_state(response))
    await response.aclose()


def readable(response: httpx.Response) -> bool:
    stream = response.extensions.get("network_stream")
    return bool(stream is not None and stream.get_extra_info("is_readable"))


class _CheckedBody(httpx.AsyncByteStream):
    """The body as httpcore reads it; at its end, bytes past the answer mean the answer was not
    framed cleanly (an error), and a socket with anything more to read is never reused."""

    def __init__(self, response: httpx.Response, request: httpx.Request) -> None:
        self._inner = response.stream
        self._response, self._request = response, request
        self._state = h11_state(response)

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for part in self._inner:  # type: ignore[union-attr]
            yield part
        leftover = self._state is not None and bool(self._state.trailing_data[0])
        if leftover or readable(self._response):
            never_reuse(self._state)
        if leftover:
            raise MalformedAnswer(
                "the upstream sent bytes past the end of its answer", request=self._request
            )

    async def aclose(self) -> None:
        await self._inner.aclose()  # type: ignore[union-attr]
