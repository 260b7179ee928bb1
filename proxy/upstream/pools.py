"""One connection pool per upstream server: one that hangs cannot take another's connections."""

from __future__ import annotations

from collections.abc import Sequence

import httpx

from proxy.settings import Upstream
from proxy.upstream.transport import Http11Transport

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
            # Plain http (a model server beside us): the lean transport; TLS: httpx's own.
            pool = (
                Http11Transport(limits)
                if url.scheme == "http"
                else httpx.AsyncHTTPTransport(limits=limits)
            )
            self._pools.setdefault(origin(url), pool)
        self._other = httpx.AsyncHTTPTransport(limits=OTHER)

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        pool = self._pools.get(origin(request.url), self._other)
        return await pool.handle_async_request(request)

    async def aclose(self) -> None:
        for pool in [*self._pools.values(), self._other]:
            await pool.aclose()
