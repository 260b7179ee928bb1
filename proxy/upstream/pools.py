"""One connection pool per upstream server: one that hangs cannot take another's connections."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import httpx

from proxy.settings import Upstream
from proxy.upstream.aiotransport import AiohttpTransport
from proxy.upstream.transport import CheckedTransport

Origin = tuple[bytes, bytes, int | None]
# Anything not addressed to a configured upstream (none today) gets a small pool of its own.
# An idle connection is closed before the model servers close theirs (uvicorn's, so vLLM's, and
# cpp-httplib's, so llama.cpp's, after 5 s): a request then never goes out on a socket the server
# is closing at that moment.
KEEPALIVE_S = 4.0
OTHER = httpx.Limits(max_connections=16, max_keepalive_connections=4, keepalive_expiry=KEEPALIVE_S)


def origin(url: httpx.URL) -> Origin:
    return url.raw_scheme, url.raw_host, url.port


class UpstreamPools(httpx.AsyncBaseTransport):
    """An httpx transport that sends each request through its upstream server's own pool."""

    def __init__(self, upstreams: Sequence[Upstream], name: str = "aiohttp") -> None:
        self._pools: dict[Origin, httpx.AsyncBaseTransport] = {}
        for u in upstreams:
            limits = httpx.Limits(
                max_connections=u.max_connections,
                max_keepalive_connections=min(u.max_connections, 64),
                keepalive_expiry=KEEPALIVE_S,
            )
            url = httpx.URL(u.base_url)
            # aiohttp's client behind httpx's interface, with upstream/aiotransport.py's checks.
            pool = client_for(name)(limits)
            self._pools.setdefault(origin(url), pool)
        self._other = client_for(name)(OTHER)

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        pool = self._pools.get(origin(request.url), self._other)
        return await pool.handle_async_request(request)

    def direct(self, url: httpx.URL) -> AiohttpTransport | None:
        """The aiohttp pool for `url`, for send.py to call without httpx's client in between."""
        pool = self._pools.get(origin(url), self._other)
        return pool if isinstance(pool, AiohttpTransport) else None

    async def aclose(self) -> None:
        for pool in [*self._pools.values(), self._other]:
            await pool.aclose()


class UpstreamClient(httpx.AsyncClient):
    """httpx's client over the upstreams' pools, for the odd request (a probe, /models); send.py's
    `send`, every request for an answer, goes to the pool's aiohttp client directly."""

    def __init__(self, pools: httpx.AsyncBaseTransport) -> None:
        super().__init__(transport=pools)
        self.pools = pools

    def direct(self, url: httpx.URL) -> AiohttpTransport | None:
        return self.pools.direct(url) if isinstance(self.pools, UpstreamPools) else None


def client_for(name: str) -> Callable[[httpx.Limits], httpx.AsyncBaseTransport]:
    """The transport for an upstream's pool, picked by Settings.upstream_client: `aiohttp` (the
    default: aiohttp's client, keep-alive, upstream/aiotransport.py's checks), `aiohttp-fresh` (a
    new connection per request), `httpx` (httpcore's pool with upstream/transport.py's checks),
    `httpx-plain` (no checks: bench/overhead.py's --clients only, to show what they cost)."""
    if name == "httpx":
        return CheckedTransport
    if name == "httpx-plain":
        return lambda limits: httpx.AsyncHTTPTransport(limits=limits)
    fresh = name == "aiohttp-fresh"
    return lambda limits: AiohttpTransport(limits, fresh_connections=fresh)
