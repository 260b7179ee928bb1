"""Other /v1/* routes (completions, embeddings, …): forwarded as they are, without compaction."""

from __future__ import annotations

import json

from fastapi import APIRouter, Request, Response

from proxy.errors import BadRequest, MethodNotAllowed, ModelNotFound, NotFound
from proxy.exchange.disconnect import Streamed
from proxy.http.deps import ClientAuth, ServicesDep, read_body, require_json
from proxy.http.paths import FORWARDED_METHODS, forwardable
from proxy.upstream import send as up

router = APIRouter(dependencies=[ClientAuth])

# Every method is routed here so that a refused one gets the envelope, not a bare 405.
_METHODS = ["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"]


@router.api_route("/v1/{path:path}", methods=_METHODS, include_in_schema=False)
@router.api_route("/s/{session}/v1/{path:path}", methods=_METHODS, include_in_schema=False)
async def passthrough(
    path: str, request: Request, services: ServicesDep, session: str | None = None
) -> Response:
    target = forwardable(path, request.method)
    if request.method not in FORWARDED_METHODS:
        allow = ", ".join(FORWARDED_METHODS)
        raise MethodNotAllowed(f"{request.method} is not forwarded; use {allow}", allow=allow)
    if request.method == "POST":
        require_json(request)
    raw = await read_body(request, services.settings.max_body_bytes)
    model = _model_of(raw) if raw else None
    settings = services.settings
    upstream = settings.upstream_for(model or "*")
    if upstream is None:
        raise ModelNotFound(model) if model else NotFound("No upstream is configured")
    r = await up.send(
        services.client,
        upstream,
        request.method,
        target,
        content=raw or None,
        params=request.query_params,
        stream=True,
    )
    if up.is_event_stream(r):
        return Streamed(up.stream_body(r, upstream), r.status_code, up.response_headers(r))
    return Response(await up.read(r, upstream), r.status_code, up.response_headers(r))


def _model_of(raw: bytes) -> str | None:
    try:
        data = json.loads(raw)
    except ValueError:
        raise BadRequest("Invalid JSON body") from None
    model = data.get("model") if isinstance(data, dict) else None
    return model if isinstance(model, str) else None
