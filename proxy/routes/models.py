"""GET /v1/models: the models of every upstream, merged."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import httpx
from fastapi import APIRouter

from proxy import upstream as up
from proxy.deps import ClientAuth, ServicesDep
from proxy.settings import Upstream

router = APIRouter(dependencies=[ClientAuth])
log = logging.getLogger("ctxproxy.models")


@router.get("/v1/models")
@router.get("/s/{session}/v1/models", include_in_schema=False)
async def list_models(services: ServicesDep, session: str | None = None) -> dict[str, Any]:
    ups = services.settings.upstreams
    listed = await asyncio.gather(*(_models_of(services.client, u) for u in ups))
    seen: dict[str, dict[str, Any]] = {}
    for upstream, models in zip(ups, listed, strict=True):
        named = [
            {"id": m, "object": "model", "owned_by": upstream.name}
            for m in upstream.models
            if m != "*"
        ]
        for model in models + named:
            seen.setdefault(model["id"], model)
    return {"object": "list", "data": list(seen.values())}


async def _models_of(client: httpx.AsyncClient, upstream: Upstream) -> list[dict[str, Any]]:
    try:
        r = await up.send(client, upstream, "GET", "/models")
        r.raise_for_status()
        data = r.json().get("data", [])
    except Exception as exc:  # one dead upstream must not hide the others' models
        log.warning("listing models of upstream %r failed: %s", upstream.name, exc)
        return []
    return [m for m in data if isinstance(m, dict) and isinstance(m.get("id"), str)]
