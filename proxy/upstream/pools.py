"""One connection pool per upstream server: one that hangs cannot take another's connections."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence

import httpx

from proxy.settings import Upstream
from proxy.upstream.transport import CheckedTransport

Origin = tuple[bytes, bytes, int | None]
# Anything not addressed to a configured upstream (none today) gets a small pool of its own.
OTHER = httpx.Limits(max_connections=16, max_keepalive_connections=4)


def origin(url: httpx.URL) -> Origin:
    return url.raw_scheme, url.raw_host, url.port


class UpstreamPools(httpx.AsyncBaseTransport):
    """An httpx transport that sends each request through its upstream server's own pool."""

    def __init__(self, upstreams: Sequence[Upstream]) -> None:
        self._pools: dict[Origin, httpx.AsyncBaseTransport] = {}
        for u in upstreams:
            limits = httpx.Limits(
                max_connections=u.max_connections,
                max_keepalive_connections=min(u.max_connections, 64),
            )
            url = httpx.URL(u.base_url)
            # httpx's transport for http and https alike, with upstream/transport.py's checks.
            pool = client_for(os.environ.get("CTXPROXY_UPSTREAM_CLIENT", "httpx"))(limits)
            self._pools.setdefault(origin(url), pool)
        self._other = CheckedTransport(OTHER)

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        pool = self._pools.get(origin(request.url), self._other)
        return await pool.handle_async_request(request)

    async def aclose(self) -> None:
        for pool in [*self._pools.values(), self._other]:
            await pool.aclose()


def client_for(name: str) -> Callable[[httpx.Limits], httpx.AsyncBaseTransport]:
    """The transport for an upstream's pool. CTXPROXY_UPSTREAM_CLIENT=httpx-plain (for
    bench/overhead.py's --clients only) drops upstream/transport.py's checks to show their cost."""
    if name in ("aiohttp", "aiohttp-keepalive"):
        from proxy.upstream.aiotransport import AiohttpTransport

        fresh = name == "aiohttp"
        return lambda limits: AiohttpTransport(limits, fresh_connections=fresh)
    if name == "httpx-plain":
        return lambda limits: httpx.AsyncHTTPTransport(limits=limits)
    return CheckedTransport
