"""POST /v1/compress: compaction as a service for gateways (api/retrieve.py gives refs back)."""

from __future__ import annotations

from starlette.routing import Route

from proxy.exchange import compress
from proxy.http.plain import plain_routes

PATHS = ("/v1/compress", "/s/{session}/v1/compress")


def routes() -> list[Route]:
    return plain_routes(PATHS, compress.run)
