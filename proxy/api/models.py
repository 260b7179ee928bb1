"""GET /v1/models: the models of every upstream, merged."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import httpx
from fastapi import APIRouter

from proxy.errors import ProxyError, UpstreamUnavailable
from proxy.http.deps import ClientAuth, ServicesDep
from proxy.settings import Upstream
from proxy.upstream import send as up

router = APIRouter(dependencies=[ClientAuth])
log = logging.getLogger("ctxproxy.models")


@router.get("/v1/models")
@router.get("/s/{session}/v1/models", include_in_schema=False)
async def list_models(services: ServicesDep, session: str | None = None) -> dict[str, Any]:
    """Every upstream's models, and the names configured for it. When no upstream answers and
    none has names configured, the list would be empty: a 502 naming each URL says why."""
    ups = services.settings.upstreams
    listed = await asyncio.gather(*(_models_of(services.client, u) for u in ups))
    seen: dict[str, dict[str, Any]] = {}
    failures: list[str] = []
    for upstream, (models, failure) in zip(ups, listed, strict=True):
        named = [
            {"id": m, "object": "model", "owned_by": upstream.name}
            for m in upstream.models
            if m != "*"
        ]
        for model in models + named:
            seen.setdefault(model["id"], model)
        if failure:
            failures.append(failure)
    if not seen and failures:
        raise UpstreamUnavailable("No model to list: " + "; ".join(failures))
    return {"object": "list", "data": list(seen.values())}


async def _models_of(
    client: httpx.AsyncClient, upstream: Upstream
) -> tuple[list[dict[str, Any]], str | None]:
    """The upstream's models, or none and why (one dead upstream must not hide the others)."""
    try:
        r = await up.send(client, upstream, "GET", "/models")
    except ProxyError as exc:
        log.warning("listing models: %s", exc.message)
        return [], exc.message
    try:
        await r.aread()
        r.raise_for_status()
        data = r.json().get("data", [])
    except (httpx.HTTPError, ValueError, AttributeError) as exc:
        why = f"upstream '{upstream.name}' at {upstream.base_url}/models answered {exc!s:.200}"
        log.warning("listing models: %s", why)
        return [], why
    return [m for m in data if isinstance(m, dict) and isinstance(m.get("id"), str)], None
