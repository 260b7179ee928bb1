"""GET /metrics: this process's Prometheus metrics, guarded like the audit API."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Request, Response
from prometheus_client.exposition import choose_encoder

from proxy.http.access import audit_viewer
from proxy.http.deps import ServicesDep

router = APIRouter(tags=["observe"], dependencies=[Depends(audit_viewer)])


@router.get(
    "/metrics", summary="Prometheus metrics (a key once keys are set, else direct loopback)"
)
async def metrics(request: Request, services: ServicesDep) -> Response:
    # Text format 0.0.4 unless the scraper asks for OpenMetrics or text 1.0.0.
    encode, content_type = choose_encoder(request.headers.get("accept", ""))
    return Response(encode(services.metrics.registry), headers={"content-type": content_type})
