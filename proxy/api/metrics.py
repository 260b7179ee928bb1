"""GET /metrics: this process's Prometheus metrics, guarded like the audit API's /stats: every
tenant's counters are there, so once keys are set only the admin key reads them."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response
from prometheus_client.exposition import choose_encoder

from proxy.http.access import ViewerDep
from proxy.http.deps import ServicesDep

router = APIRouter(tags=["observe"])


@router.get(
    "/metrics", summary="Prometheus metrics (the admin key once keys are set, else loopback)"
)
async def metrics(request: Request, services: ServicesDep, viewer: ViewerDep) -> Response:
    viewer.require_admin()
    # Text format 0.0.4 unless the scraper asks for OpenMetrics or text 1.0.0.
    encode, content_type = choose_encoder(request.headers.get("accept", ""))
    return Response(encode(services.metrics.registry), headers={"content-type": content_type})
