"""create_app(settings) -> the FastAPI app; its lifespan owns the HTTP client and the database."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from functools import partial
from typing import Any

import httpx
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from sqlalchemy.exc import OperationalError
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp

from proxy.api import (
    audit,
    chat,
    compress,
    health,
    messages,
    metrics,
    models,
    passthrough,
    responses,
    retrieve,
    ui,
)
from proxy.compile.calibrate import Calibration
from proxy.compile.tokens import TokenCounter
from proxy.errors import ProxyError, StorageUnavailable, error_body
from proxy.formats import anthropic
from proxy.http import openapi
from proxy.http.guard import HostGuard
from proxy.http.hot import Hot
from proxy.http.memory import ReturnMemory
from proxy.http.plain import PlainRoute
from proxy.observe.metrics import Metrics, RequestMetrics
from proxy.offload import hop
from proxy.services import Services
from proxy.settings import Settings
from proxy.store import Store
from proxy.store.heartbeat import Liveness
from proxy.upstream.pools import UpstreamClient, UpstreamPools
from proxy.upstream.windows import Windows
from strategies import budget as caches

log = logging.getLogger("ctxproxy")


def create_app(settings: Settings, *, transport: httpx.AsyncBaseTransport | None = None) -> FastAPI:
    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        caches.SHARED.resize(settings.cache_mb << 20)
        store = Store(settings.database_url)
        if await hop(store.needs_upgrade):
            await hop(store.upgrade)
        await hop(store.ids_key)  # read once here, off the answers' path
        liveness = Liveness(store)
        await hop(liveness.start)
        pools = transport or UpstreamPools(settings.upstreams, settings.upstream_client)
        try:
            async with UpstreamClient(pools) as client:
                app.state.services = Services(
                    settings=settings,
                    client=client,
                    counter=TokenCounter(image_tokens=settings.compaction.image_tokens),
                    store=store,
                    windows=Windows(client),
                    calibration=Calibration(),
                    metrics=app_metrics,
                )
                yield
        finally:
            await hop(liveness.stop)
            store.close()

    app_metrics = Metrics()  # per app, not a global registry: tests build many apps
    app = App(title="ctxproxy", version="0.1.0", lifespan=lifespan)
    app.add_middleware(ReturnMemory)
    app.add_middleware(RequestMetrics, metrics=app_metrics)
    app.add_middleware(HostGuard, allowed=settings.allowed_hosts)
    app.include_router(health.router)
    app.include_router(audit.router)
    app.include_router(messages.router)
    app.include_router(responses.router)
    app.include_router(models.router)
    app.include_router(retrieve.router)  # ahead of the pass-through's /v1/*
    app.include_router(passthrough.router)
    app.include_router(ui.router)
    app.include_router(metrics.router)
    app.router.routes[:0] = [
        *chat.routes(),
        *messages.routes(),
        *responses.routes(),
        *compress.routes(),
    ]
    _install_error_handlers(app)
    openapi.install(app, chat.openapi_paths() | compress.openapi_paths())
    app.hot = partial(Hot, metrics=app_metrics, allowed=settings.allowed_hosts)
    return app


class App(FastAPI):
    """FastAPI, with the plain routes' requests dispatched ahead of its middleware stack
    (proxy/http/hot.py): `hot` wraps the stack once it is built."""

    hot: Callable[..., ASGIApp] | None = None

    def build_middleware_stack(self) -> ASGIApp:
        stack = super().build_middleware_stack()
        if self.hot is None:
            return stack
        plain = [r for r in self.router.routes if isinstance(r, PlainRoute)]
        return self.hot(stack, plain, self.exception_handlers)


def app_from_env() -> FastAPI:
    """uvicorn's app factory for `ctxproxy serve --workers N`: each worker process reads the
    settings from $CTXPROXY_CONFIG (or ./config.yaml) and CTXPROXY_* variables."""
    from proxy.observe.access_log import configure_logging
    from proxy.settings import load_settings

    settings = load_settings()
    configure_logging(settings.log_level)
    from proxy import process

    app = create_app(settings)
    process.prepare()
    return app


def _install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(ProxyError)
    async def proxy_error(request: Request, exc: ProxyError) -> JSONResponse:
        if anthropic.is_messages_path(request.url.path):
            body = anthropic.proxy_error_body(exc)
            return JSONResponse(body, status_code=exc.status, headers=exc.headers)
        return JSONResponse(exc.body(), status_code=exc.status, headers=exc.headers)

    def reply(request: Request, body: dict, status: int, headers: Any = None) -> JSONResponse:
        """An error in the envelope of the API the request came in on."""
        if anthropic.is_messages_path(request.url.path):
            body = anthropic.error_body(status, body["error"]["message"])
        return JSONResponse(body, status_code=status, headers=headers)

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        err = exc.errors()[0] if exc.errors() else {"loc": (), "msg": "invalid request"}
        where = ".".join(str(p) for p in err["loc"])
        body = error_body(
            f"Invalid request: {where}: {err['msg']}", "invalid_request_error", where or None
        )
        return reply(request, body, 400)

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, exc: HTTPException) -> JSONResponse:
        kind = "invalid_request_error" if exc.status_code < 500 else "server_error"
        body = error_body(str(exc.detail), kind)
        return reply(request, body, exc.status_code, getattr(exc, "headers", None))

    @app.exception_handler(OperationalError)
    async def storage(request: Request, exc: OperationalError) -> JSONResponse:
        # Disk full, database gone: the write's transaction rolled back, so what is stored is
        # consistent; the client may retry once the operator has made room.
        log.error("database unavailable on %s %s: %s", request.method, request.url.path, exc.orig)
        err = StorageUnavailable(
            "ctxproxy cannot write to its database (disk full or database unavailable); "
            "nothing of this request was stored. Retry later."
        )
        return reply(request, err.body(), err.status, {"retry-after": "10"})

    @app.exception_handler(Exception)
    async def unexpected(request: Request, exc: Exception) -> JSONResponse:
        log.exception("unhandled error on %s %s", request.method, request.url.path)
        return reply(request, error_body("Internal proxy error", "server_error"), 500)
