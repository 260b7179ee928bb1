"""aiohttp's client (llhttp parser, its own pool) behind httpx's transport interface."""

from __future__ import annotations

from collections.abc import AsyncIterator

import aiohttp
import httpx
from yarl import URL


class AiohttpTransport(httpx.AsyncBaseTransport):
    def __init__(self, limits: httpx.Limits) -> None:
        self._limits = limits
        self._session: aiohttp.ClientSession | None = None

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None:
            connector = aiohttp.TCPConnector(
                limit=self._limits.max_connections or 0,
                limit_per_host=0,
                keepalive_timeout=self._limits.keepalive_expiry or 5.0,
            )
            self._session = aiohttp.ClientSession(
                connector=connector,
                auto_decompress=False,
                cookie_jar=aiohttp.DummyCookieJar(),
                skip_auto_headers=("User-Agent", "Accept", "Accept-Encoding", "Content-Type"),
            )
        return self._session

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        t = request.extensions.get("timeout", {})
        timeout = aiohttp.ClientTimeout(
            connect=t.get("pool"), sock_connect=t.get("connect"), sock_read=t.get("read")
        )
        body = b"".join([part async for part in request.stream])  # type: ignore[union-attr]
        headers = [(k, v) for k, v in request.headers.multi_items() if k != "host"]
        try:
            resp = await self._client().request(
                request.method,
                URL(str(request.url), encoded=True),
                data=body or None,
                headers=headers,
                allow_redirects=False,
                timeout=timeout,
            )
        except Exception as exc:
            raise _mapped(exc, request) from exc
        return httpx.Response(
            resp.status,
            headers=resp.raw_headers,
            stream=_Body(resp, request),
            extensions={"http_version": b"HTTP/1.1", "reason_phrase": (resp.reason or "").encode()},
        )

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()


class _Body(httpx.AsyncByteStream):
    def __init__(self, resp: aiohttp.ClientResponse, request: httpx.Request) -> None:
        self.resp, self.request, self.done = resp, request, False

    async def __aiter__(self) -> AsyncIterator[bytes]:
        try:
            async for part in self.resp.content.iter_any():
                yield part
            self.done = True
        except Exception as exc:
            raise _mapped(exc, self.request) from exc

    async def aclose(self) -> None:
        if self.done:
            self.resp.release()
        else:
            self.resp.close()


def _mapped(exc: Exception, request: httpx.Request) -> httpx.HTTPError:
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
    if isinstance(exc, OSError):
        return httpx.ReadError(str(exc), request=request)
    return httpx.RemoteProtocolError(f"{type(exc).__name__}: {exc}", request=request)
