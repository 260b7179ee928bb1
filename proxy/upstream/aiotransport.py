"""aiohttp's client (llhttp's parser) for every upstream request, with the checks that keep one
request's leftovers out of the next request's answer. send.py calls `AiohttpTransport.open`
directly; httpx's client reaches it through httpx's transport interface (probes, /models).

aiohttp would pool a connection the moment its answer's body arrived, and hand an idle one to the
next request without asking whether anything came meanwhile. Here an answer keeps its connection
until its body was read and checked (`_Response`), and a connection is pooled, and handed out
again (`_CheckedConnector`), only if nothing arrived on it: nothing parsed (a late 408, a copy of
an answer, junk), nothing queued, nothing waiting on its socket (bytes that came while the event
loop was busy, or the upstream's close), as httpcore checks. With `fresh_connections`
(CTXPROXY_UPSTREAM_CLIENT=aiohttp-fresh) each request gets a new connection, closed after its
answer. Both ways: a status outside 200-599 (999, a 101), an answer framed by both
Transfer-Encoding and Content-Length, or by a Transfer-Encoding other than plain chunked, is
refused at the head (transport.py's `head_problem`); bytes past the end of an answer are refused
at the end of the body. Each is a MalformedAnswer (a 502), never an answer.
"""

from __future__ import annotations

import asyncio
import select
import time
from collections.abc import AsyncIterator, Callable, Mapping
from contextvars import ContextVar
from functools import lru_cache
from typing import Any

import aiohttp
import httpx
from aiohttp.http_exceptions import HttpProcessingError
from yarl import URL

from proxy.upstream.transport import MalformedAnswer, head_problem

Headers = Mapping[str, str] | list[tuple[str, str]]
SKIP = ("User-Agent", "Accept", "Accept-Encoding", "Content-Type")  # httpx already set ours


class Parts(aiohttp.payload.Payload):
    """A body as the buffers it was made of (send.encode_parts), written one after another: a
    long history's bytes go to the socket as they are, not joined into one buffer first."""

    _autoclose = True  # nothing to close: it may go again (a retry on a fresh connection)

    def __init__(self, parts: list[bytes]) -> None:
        super().__init__(parts, content_type="application/json")
        self.parts = parts
        self._size = sum(map(len, parts))

    def decode(self, encoding: str = "utf-8", errors: str = "strict") -> str:
        return b"".join(self.parts).decode(encoding, errors)

    async def write(self, writer: aiohttp.abc.AbstractStreamWriter) -> None:
        for part in self.parts:
            await writer.write(part)


class AiohttpTransport(httpx.AsyncBaseTransport):
    def __init__(self, limits: httpx.Limits, *, fresh_connections: bool = False) -> None:
        # Without the private hook `_CheckedConnector` needs, only fresh connections are safe.
        self._limits = limits
        self._fresh = fresh_connections or not callable(getattr(aiohttp.TCPConnector, "_get", None))
        self._session: aiohttp.ClientSession | None = None
        # Our own wait for a connection: aiohttp's times the wait and the connect as one, and a
        # busy upstream must be told apart from one that does not accept (send.py's 504 "busy").
        self._slots = asyncio.Semaphore(limits.max_connections or 1_000_000)

    def _client(self) -> aiohttp.ClientSession:
        # Built on first use, inside the running loop aiohttp needs.
        if self._session is None:
            connector = (aiohttp.TCPConnector if self._fresh else _CheckedConnector)(
                limit=self._limits.max_connections or 0,
                limit_per_host=0,
                force_close=self._fresh,
                keepalive_timeout=None if self._fresh else (self._limits.keepalive_expiry or 5.0),
            )
            self._session = aiohttp.ClientSession(
                connector=connector,
                auto_decompress=False,
                cookie_jar=aiohttp.DummyCookieJar(),
                skip_auto_headers=SKIP,
                response_class=_Response,
            )
        return self._session

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        """httpx's way in, for the odd request through httpx's client (a probe, /models)."""
        body = b"".join([part async for part in request.stream])  # type: ignore[union-attr]
        headers = [(k, v) for k, v in request.headers.multi_items() if k != "host"]
        return await self.open(request, body, headers)

    async def open(
        self, request: httpx.Request, body: bytes | Parts | None, headers: Headers
    ) -> httpx.Response:
        """Send `request` (its method, URL and timeouts; `body` and `headers` as they go out) on
        aiohttp directly; the answer comes back as httpx's Response, its body not read yet.
        send.py's `send` calls this without httpx's client, whose own work per request is
        spared."""
        t = request.extensions.get("timeout", {})
        try:
            async with asyncio.timeout(t.get("pool")):
                await self._slots.acquire()
        except TimeoutError:
            raise httpx.PoolTimeout("no free connection in time", request=request) from None
        try:
            resp = await self._send(request, body, headers, t)
        except BaseException:
            self._slots.release()
            raise
        response = httpx.Response(
            resp.status,
            headers=resp.raw_headers,
            # given here, not set later: httpx reads a response built without a stream at once
            stream=_CheckedBody(resp, request, self._slots.release),
            request=request,
            extensions={"http_version": b"HTTP/1.1", "reason_phrase": (resp.reason or "").encode()},
        )
        problem = head_problem(response)
        if problem:
            await response.aclose()
            raise MalformedAnswer(problem, request=request)
        return response

    async def _send(
        self,
        request: httpx.Request,
        body: bytes | Parts | None,
        headers: Headers,
        t: dict[str, Any],
    ) -> aiohttp.ClientResponse:
        for attempt in (1, 2):
            REUSED.set(False)
            try:
                return await self._client().request(
                    request.method,
                    yarl_url(str(request.url)),
                    data=body or None,
                    headers=headers,
                    allow_redirects=False,
                    timeout=client_timeout(t.get("connect"), t.get("read")),
                )
            except (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError) as exc:
                # A kept-alive connection the upstream closed as the request went out on it
                # (its idle timeout): no answer began, so the request goes once more, on a
                # connection that is open. A new connection's failure is the upstream's.
                closed = not isinstance(exc, aiohttp.ClientConnectorError)
                if not (attempt == 1 and closed and REUSED.get()):
                    raise mapped(exc, request) from exc
            except Exception as exc:
                raise mapped(exc, request) from exc
        raise AssertionError("unreachable")

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()


@lru_cache(maxsize=1024)
def yarl_url(url: str) -> URL:
    return URL(url, encoded=True)


@lru_cache(maxsize=64)
def client_timeout(connect: float | None, read: float | None) -> aiohttp.ClientTimeout:
    return aiohttp.ClientTimeout(sock_connect=connect, sock_read=read)


class _CheckedConnector(aiohttp.TCPConnector):
    """A pooled connection that has parsed something since it went idle (`should_close`: a late
    408, a forged answer, junk), or whose socket holds anything not read yet, is closed instead of
    handed out. `_get` is aiohttp's private hook: tests/e2e/test_upstream_faults.py's late faults
    and tests/e2e/test_stray_bytes.py fail if an upgrade changes it."""

    async def _get(self, key: Any, traces: list[Any]) -> aiohttp.connector.Connection | None:
        idle = self._conns.get(key)
        # The pool hands out its longest-idle connection first (FIFO): if even that one came
        # back less than REST_S ago, a new connection is opened instead, so a copy the server
        # sends a moment after an answer lands on an idle socket, where the check below sees it,
        # rather than after the connection's next request, where nothing could tell it apart.
        if idle and time.monotonic() - idle[0][1] < REST_S:
            return None
        while (conn := await super()._get(key, traces)) is not None:
            proto = conn.protocol
            if proto is not None and clean(proto):
                uses = getattr(conn.protocol, USES, 0) + 1
                setattr(conn.protocol, USES, uses)  # _CheckedBody: not its answer's any more
                REUSED.set(True)
                return conn
            conn.close()
        return None


def clean(protocol: Any) -> bool:
    """Nothing arrived on an idle connection: not parsed (a late 408, a copy of an answer, junk),
    not queued as another answer, not waiting on its socket."""
    return not (protocol.should_close or leftover(protocol) or readable(protocol.transport))


def readable(transport: asyncio.BaseTransport | None) -> bool:
    """Whether an idle connection's socket has anything to read: bytes that arrived while the
    event loop was busy (read by nobody yet, they would be the next request's answer) or the
    upstream's close. httpcore asks the same of a connection before it reuses it."""
    sock = transport.get_extra_info("socket") if transport is not None else None
    if sock is None:
        return True  # cannot tell: do not reuse
    poller = select.poll()
    poller.register(sock.fileno(), select.POLLIN)  # an error or a hang-up is reported too
    return bool(poller.poll(0))


REST_S = 0.05  # s: a pooled connection rests this long after its answer before it is reused
# Called in the request's own task once its bytes are written: work that waits for the upstream
# to have the request (the exchange's record, written meanwhile) starts then.
ON_SENT: ContextVar[Callable[[], None] | None] = ContextVar("ctxproxy_on_sent", default=None)
# Whether this request's connection came from the pool (set in the request's own task).
REUSED: ContextVar[bool] = ContextVar("ctxproxy_reused", default=False)
USES = "ctxproxy_uses"  # on a connection's protocol: how often the pool handed it out again


class _Response(aiohttp.ClientResponse):
    """Keeps its connection until `_CheckedBody` lets go of it, checked: aiohttp would pool it the
    moment the body has arrived, before the answer was read and checked, and a copy sent a moment
    after the answer would reach whichever request took the connection next."""

    protocol: Any = None
    uses = 0  # the protocol's USES when this answer began

    async def start(self, connection: aiohttp.connector.Connection) -> aiohttp.ClientResponse:
        self.protocol = connection.protocol
        self.uses = getattr(connection.protocol, USES, 0)
        sent = ON_SENT.get()
        if sent is not None:  # the head is out; the body goes in a task of aiohttp's
            writer = self._writer
            if writer is None:
                sent()
            else:
                writer.add_done_callback(lambda _: sent())
        return await super().start(connection)

    def _response_eof(self) -> None:
        """aiohttp's (private) release at the body's end: the connection stays ours instead."""

    def reusable(self) -> bool:
        """Nothing arrived past the answer, parsed or still on the socket."""
        conn = self.connection
        return conn is not None and conn.protocol is not None and clean(conn.protocol)

    def leftover(self) -> bool:
        """Bytes past this answer's end. Once the pool has handed the connection to another
        request, what its parser holds is that request's answer: the hand-out refused a
        connection holding anything (`should_close`), so nothing of this answer was left."""
        if self.protocol is None or getattr(self.protocol, USES, 0) != self.uses:
            return False
        return leftover(self.protocol)


def leftover(protocol: Any) -> bool:
    """Bytes past the answer: llhttp parsed them into another queued answer, or failed on them."""
    if protocol is None:
        return False
    # Only a parse failure: a connection closed after the answer (ours, under force_close) is not.
    return len(protocol) > 0 or isinstance(protocol.exception(), HttpProcessingError)


class _CheckedBody(httpx.AsyncByteStream):
    def __init__(
        self, resp: aiohttp.ClientResponse, request: httpx.Request, let_go: Callable[[], None]
    ) -> None:
        self._resp, self._request, self._done = resp, request, False
        self._let_go: Callable[[], None] | None = let_go

    async def __aiter__(self) -> AsyncIterator[bytes]:
        # The end is checked as soon as it is read, before the last part is handed on: aiohttp
        # pools the connection at the end of the body, and while a slow client takes that part
        # another request may already be answered on it.
        content, checked = self._resp.content, False
        try:
            while part := await content.readany():
                if content.at_eof():
                    self._check_end()
                    checked = True
                yield part
        except MalformedAnswer:
            raise
        except Exception as exc:
            raise mapped(exc, self._request) from exc
        if not checked:
            self._check_end()
        self._done = True

    def _check_end(self) -> None:
        if isinstance(self._resp, _Response) and self._resp.leftover():
            self._resp.close()
            raise MalformedAnswer(
                "the upstream sent bytes past the end of its answer", request=self._request
            )

    async def aclose(self) -> None:
        if self._done and (not isinstance(self._resp, _Response) or self._resp.reusable()):
            self._resp.release()
        else:
            self._resp.close()
        let_go, self._let_go = self._let_go, None  # once, however often httpx closes
        if let_go is not None:
            let_go()


def mapped(exc: Exception, request: httpx.Request) -> httpx.HTTPError:
    """aiohttp's errors as httpx's, so that send.py's 502/504 mapping holds for both clients."""
    if isinstance(exc, httpx.HTTPError):
        return exc
    if isinstance(exc, aiohttp.ConnectionTimeoutError):
        return httpx.ConnectTimeout(str(exc) or "connect timed out", request=request)
    if isinstance(exc, (aiohttp.SocketTimeoutError, TimeoutError)):
        return httpx.ReadTimeout(str(exc) or "read timed out", request=request)
    if isinstance(exc, aiohttp.ClientConnectorError):
        err = httpx.ConnectError(str(exc), request=request)
        err.__cause__ = exc.os_error
        return err
    if isinstance(exc, aiohttp.ServerDisconnectedError):  # closed before any answer: httpcore's
        return httpx.RemoteProtocolError("Server disconnected", request=request)  # words, send.py
    if isinstance(exc, OSError):
        return httpx.ReadError(str(exc), request=request)
    return httpx.RemoteProtocolError(f"{type(exc).__name__}: {exc}", request=request)
