"""A lean HTTP/1.1 transport for plain-http upstreams: httpcore's pool and h11 state machine
cost over a millisecond of event-loop time per request, several times what the proxy does.

Keep-alive connections per origin, at most `max_connections` at once; the body streamed as it
arrives (Content-Length, chunked, or until the server closes). Failures raise httpx's own
exceptions (ConnectError with the OS error as its cause, ReadTimeout, RemoteProtocolError, …),
so callers cannot tell it from httpx's transport. https upstreams keep httpx's transport.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import httpx

Origin = tuple[str, str, int]
HEAD_LIMIT = 1 << 16  # bytes of status line and headers
READ_SIZE = 1 << 16
NO_BODY = frozenset({204, 304})


class _Connection:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    def usable(self) -> bool:
        return not (self.writer.is_closing() or self.reader.at_eof())

    def close(self) -> None:
        self.writer.close()


class Http11Transport(httpx.AsyncBaseTransport):
    def __init__(self, limits: httpx.Limits) -> None:
        self.max_connections = limits.max_connections or 1 << 30
        self.max_idle = limits.max_keepalive_connections or 0
        self._idle: dict[Origin, list[_Connection]] = {}
        self._slots: dict[Origin, asyncio.Semaphore] = {}

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        timeout = request.extensions.get("timeout", {})
        url = request.url
        origin = (url.scheme, url.host, url.port or 80)
        slots = self._slots.setdefault(origin, asyncio.Semaphore(self.max_connections))
        try:
            async with asyncio.timeout(timeout.get("pool")):
                await slots.acquire()
        except TimeoutError:
            raise httpx.PoolTimeout("no connection became free in time", request=request) from None
        body = b"".join([part async for part in request.stream])
        head = _head(request, len(body))
        try:
            conn, reused = await self._connection(origin, request, timeout.get("connect"))
            try:
                status, reason, headers = await _exchange(conn, head + body, timeout, request)
            except _Stale:
                if not reused:
                    raise httpx.RemoteProtocolError(
                        "Server disconnected without sending a response.", request=request
                    ) from None
                conn, _ = await self._connect(origin, request, timeout.get("connect"))
                try:
                    status, reason, headers = await _exchange(conn, head + body, timeout, request)
                except _Stale:
                    conn.close()
                    raise httpx.RemoteProtocolError(
                        "Server disconnected without sending a response.", request=request
                    ) from None
        except BaseException:
            slots.release()
            raise
        stream = _Body(self, origin, conn, slots, request, status, headers, timeout.get("read"))
        return httpx.Response(
            status,
            headers=headers,
            stream=stream,
            extensions={"http_version": b"HTTP/1.1", "reason_phrase": reason},
        )

    async def _connection(
        self, origin: Origin, request: httpx.Request, timeout: float | None
    ) -> tuple[_Connection, bool]:
        idle = self._idle.get(origin)
        while idle:
            conn = idle.pop()
            if conn.usable():
                return conn, True
            conn.close()
        return await self._connect(origin, request, timeout)

    async def _connect(
        self, origin: Origin, request: httpx.Request, timeout: float | None
    ) -> tuple[_Connection, bool]:
        _, host, port = origin
        try:
            async with asyncio.timeout(timeout):
                reader, writer = await asyncio.open_connection(host, port, limit=HEAD_LIMIT)
        except TimeoutError:
            raise httpx.ConnectTimeout("connect timed out", request=request) from None
        except OSError as exc:
            raise httpx.ConnectError(str(exc), request=request) from exc
        return _Connection(reader, writer), False

    def _keep(self, origin: Origin, conn: _Connection) -> None:
        idle = self._idle.setdefault(origin, [])
        if len(idle) < self.max_idle and conn.usable():
            idle.append(conn)
        else:
            conn.close()

    async def aclose(self) -> None:
        for idle in self._idle.values():
            for conn in idle:
                conn.close()
        self._idle.clear()


class _Stale(Exception):
    """A kept-alive connection the server had closed: nothing was answered on it."""


def _head(request: httpx.Request, length: int) -> bytes:
    lines = [b"%s %s HTTP/1.1" % (request.method.encode(), request.url.raw_path)]
    has_length = False
    for name, value in request.headers.raw:
        low = name.lower()
        if low == b"content-length":
            has_length = True
        elif low == b"transfer-encoding":
            continue  # the body is sent whole, with its length
        lines.append(name + b": " + value)
    if not has_length and (length or request.method not in ("GET", "HEAD")):
        lines.append(b"Content-Length: %d" % length)
    return b"\r\n".join(lines) + b"\r\n\r\n"


async def _exchange(
    conn: _Connection, data: bytes, timeout: dict[str, Any], request: httpx.Request
) -> tuple[int, bytes, list[tuple[bytes, bytes]]]:
    try:
        return await _send_and_read_head(conn, data, timeout, request)
    except asyncio.CancelledError:  # the caller gave up (a client left): the answer is unread
        conn.close()
        raise


async def _send_and_read_head(
    conn: _Connection, data: bytes, timeout: dict[str, Any], request: httpx.Request
) -> tuple[int, bytes, list[tuple[bytes, bytes]]]:
    try:
        conn.writer.write(data)
        async with asyncio.timeout(timeout.get("write")):
            await conn.writer.drain()
    except TimeoutError:
        conn.close()
        raise httpx.WriteTimeout("write timed out", request=request) from None
    except OSError:
        conn.close()
        raise _Stale from None
    while True:
        try:
            async with asyncio.timeout(timeout.get("read")):
                raw = await conn.reader.readuntil(b"\r\n\r\n")
        except TimeoutError:
            conn.close()
            raise httpx.ReadTimeout("read timed out", request=request) from None
        except asyncio.IncompleteReadError as exc:
            conn.close()
            if not exc.partial:
                raise _Stale from None
            raise httpx.RemoteProtocolError("incomplete response head", request=request) from None
        except (asyncio.LimitOverrunError, ValueError):
            conn.close()
            raise httpx.RemoteProtocolError("response head too long", request=request) from None
        except OSError as exc:
            conn.close()
            raise _Stale from exc
        status, reason, headers = _parse_head(raw, request)
        if not 100 <= status < 200 or status == 101:
            return status, reason, headers


def _parse_head(raw: bytes, request: httpx.Request) -> tuple[int, bytes, list]:
    lines = raw[:-4].split(b"\r\n")
    parts = lines[0].split(b" ", 2)
    if len(parts) < 2 or not parts[0].startswith(b"HTTP/1.") or not parts[1].isdigit():
        raise httpx.RemoteProtocolError(f"malformed status line {lines[0][:80]!r}", request=request)
    headers = []
    for line in lines[1:]:
        name, sep, value = line.partition(b":")
        if not sep or not name or name != name.strip():
            raise httpx.RemoteProtocolError("malformed response header", request=request)
        headers.append((name, value.strip()))
    return int(parts[1]), parts[2] if len(parts) > 2 else b"", headers


class _Body(httpx.AsyncByteStream):
    """The response body as it arrives; the connection goes back to the pool once it has been
    read to its end, and is closed if the reader lets go earlier."""

    def __init__(
        self,
        pool: Http11Transport,
        origin: Origin,
        conn: _Connection,
        slots: asyncio.Semaphore,
        request: httpx.Request,
        status: int,
        headers: list[tuple[bytes, bytes]],
        read_timeout: float | None,
    ) -> None:
        self.pool, self.origin, self.conn, self.slots = pool, origin, conn, slots
        self.request, self.timeout = request, read_timeout
        fields = {k.lower(): v for k, v in headers}
        self.keep_alive = fields.get(b"connection", b"").lower() != b"close"
        self.chunked = b"chunked" in fields.get(b"transfer-encoding", b"").lower()
        length = fields.get(b"content-length")
        self.length: int | None = None
        if request.method == "HEAD" or status in NO_BODY:
            self.length = 0
        elif not self.chunked and length is not None:
            if not length.strip().isdigit():
                raise httpx.RemoteProtocolError("malformed Content-Length", request=request)
            self.length = int(length)
        elif not self.chunked:
            self.keep_alive = False  # read until the server closes
        self.done = False
        self.released = False

    async def __aiter__(self) -> AsyncIterator[bytes]:
        try:
            if self.chunked:
                async for part in self._chunks():
                    yield part
            elif self.length is not None:
                left = self.length
                while left > 0:
                    data = await self._read(min(left, READ_SIZE))
                    if not data:
                        raise httpx.RemoteProtocolError(
                            "peer closed connection without sending complete message body",
                            request=self.request,
                        )
                    left -= len(data)
                    yield data
            else:
                while data := await self._read(READ_SIZE):
                    yield data
            self.done = True
        finally:
            await self.aclose()

    async def _chunks(self) -> AsyncIterator[bytes]:
        while True:
            line = await self._line()
            try:
                size = int(line.split(b";", 1)[0].strip(), 16)
            except ValueError:
                raise httpx.RemoteProtocolError(
                    "malformed chunk size", request=self.request
                ) from None
            if size == 0:
                while await self._line():  # trailers, up to the blank line
                    pass
                return
            left = size
            while left > 0:
                data = await self._read(min(left, READ_SIZE))
                if not data:
                    raise httpx.RemoteProtocolError(
                        "peer closed connection without sending complete message body",
                        request=self.request,
                    )
                left -= len(data)
                yield data
            if await self._line():
                raise httpx.RemoteProtocolError("malformed chunk end", request=self.request)

    async def _line(self) -> bytes:
        try:
            async with asyncio.timeout(self.timeout):
                line = await self.conn.reader.readuntil(b"\r\n")
        except TimeoutError:
            raise httpx.ReadTimeout("read timed out", request=self.request) from None
        except asyncio.IncompleteReadError:
            raise httpx.RemoteProtocolError(
                "peer closed connection without sending complete message body",
                request=self.request,
            ) from None
        except (asyncio.LimitOverrunError, ValueError):
            raise httpx.RemoteProtocolError("chunk line too long", request=self.request) from None
        except OSError as exc:
            raise httpx.ReadError(str(exc), request=self.request) from exc
        return line[:-2]

    async def _read(self, size: int) -> bytes:
        try:
            async with asyncio.timeout(self.timeout):
                return await self.conn.reader.read(size)
        except TimeoutError:
            raise httpx.ReadTimeout("read timed out", request=self.request) from None
        except OSError as exc:
            raise httpx.ReadError(str(exc), request=self.request) from exc

    async def aclose(self) -> None:
        if self.released:
            return
        self.released = True
        if self.done and self.keep_alive:
            self.pool._keep(self.origin, self.conn)
        else:
            self.conn.close()
        self.slots.release()
