"""GET /healthz (the process is up) and GET /readyz (its dependencies answer)."""

from __future__ import annotations

import asyncio

import httpx
from fastapi import APIRouter
from fastapi.responses import JSONResponse

from proxy.http.deps import ServicesDep
from proxy.settings import Upstream
from proxy.upstream import send as up

router = APIRouter()


@router.get("/healthz")
async def healthz() -> dict[str, str]:
    return {"status": "ok"}


@router.get("/readyz")
async def readyz(services: ServicesDep) -> JSONResponse:
    ups = services.settings.upstreams
    results = await asyncio.gather(*(_probe(services.client, u) for u in ups))
    upstreams = {u.name: status for u, status in zip(ups, results, strict=True)}
    ready = not ups or any(s == "ok" for s in results)
    body = {"status": "ready" if ready else "unavailable", "upstreams": upstreams}
    return JSONResponse(body, status_code=200 if ready else 503)


async def _probe(client: httpx.AsyncClient, upstream: Upstream) -> str:
    try:
        r = await client.get(
            upstream.base_url + "/models", headers=up.request_headers(upstream), timeout=2.0
        )
    except httpx.HTTPError as exc:
        return f"unreachable: {up.describe(exc)}"
    return "ok" if r.status_code == 200 else f"http {r.status_code}"
