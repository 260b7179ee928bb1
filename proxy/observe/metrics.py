"""Prometheus metrics per app; each finished chat exchange counted here and handed to the
access log (proxy/observe/access_log.py).

Metrics live in a `CollectorRegistry` built per app (no global registry), so tests can build many
apps. With several uvicorn workers each process has its own registry: a scrape sees one worker.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from proxy.observe import access_log
from strategies.events import CompactionEvent

# LLM answers take seconds to minutes: the default buckets stop at 10 s.
LATENCY_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600)
TTFT_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)


class Metrics:
    """The app's collectors, all registered on its own registry."""

    def __init__(self) -> None:
        self.registry = r = CollectorRegistry(auto_describe=True)
        self.http_requests = Counter(
            "ctxproxy_http_requests",
            "HTTP requests by route template and status",
            ["method", "route", "status"],
            registry=r,
        )
        self.http_latency = Histogram(
            "ctxproxy_http_request_duration_seconds",
            "Time from request to the end of the response body",
            ["method", "route"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.chat_requests = Counter(
            "ctxproxy_chat_requests",
            "Chat exchanges recorded, by upstream, status and streaming",
            ["upstream", "status", "stream"],
            registry=r,
        )
        self.chat_latency = Histogram(
            "ctxproxy_chat_latency_seconds",
            "Chat exchange time, from request to the answer's end",
            ["upstream", "stream"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.ttft = Histogram(
            "ctxproxy_chat_time_to_first_token_seconds",
            "Streamed chat exchanges: time from request to the first relayed chunk",
            ["upstream"],
            buckets=TTFT_BUCKETS,
            registry=r,
        )
        self.tokens_original = Counter(
            "ctxproxy_tokens_original",
            "Prompt tokens as the clients sent them (estimated)",
            ["upstream"],
            registry=r,
        )
        self.tokens_compiled = Counter(
            "ctxproxy_tokens_compiled",
            "Prompt tokens as forwarded upstream after compaction",
            ["upstream"],
            registry=r,
        )
        self.compactions = Counter(
            "ctxproxy_compaction_events",
            "Compaction passes that fired for a request (carried-over passes not counted)",
            ["strategy", "phase"],
            registry=r,
        )
        self.compaction_saved = Counter(
            "ctxproxy_compaction_tokens_saved",
            "Tokens removed by the compaction passes that fired",
            ["strategy", "phase"],
            registry=r,
        )
        self.upstream_errors = Counter(
            "ctxproxy_upstream_errors",
            "Upstream failures: unavailable, timeout, http_<status>, or stream (error mid-stream)",
            ["upstream", "kind"],
            registry=r,
        )
        self.cached_tokens = Counter(
            "ctxproxy_upstream_cached_tokens",
            "Prompt tokens the upstream reported it took from its cache",
            ["upstream"],
            registry=r,
        )
        self.cache_lost = Counter(
            "ctxproxy_cache_lost_tokens",
            "Prompt tokens an unchanged view would have found cached and this one did not, by "
            "cause (firing, client, evicted); mode observe: what compaction would have lost",
            ["upstream", "cause", "mode"],
            registry=r,
        )
        self.net_saved = Gauge(
            "ctxproxy_net_saved_tokens",
            "Prefill tokens compaction saved (original - compiled) minus the cache its firings "
            "lost; mode observe: what it would have saved",
            ["upstream", "mode"],
            registry=r,
        )
        self.recalls = Counter(
            "ctxproxy_recalls",
            "ctxproxy_recall calls answered: ok, truncated, not_found, no_match, bad_call, no_room",
            ["upstream", "outcome"],
            registry=r,
        )


@dataclass
class FinishedExchange:
    """Everything about one finished chat exchange that metrics and the access log need."""

    session: str
    seq: int
    model: str
    upstream: str
    stream: bool
    status: int
    latency_s: float
    ttft_s: float | None
    tokens_original: int
    tokens_compiled: int
    budget: int | None = None  # the prompt's, tools included: the basis of tokens_compiled
    window: int | None = None
    counted: bool = True  # False for a refused request: its figures are logged, not counted
    events: list[CompactionEvent] = field(default_factory=list)
    partial: bool = False
    error: dict[str, Any] | None = None
    messages: list[dict[str, Any]] | None = None  # only logged with log_content
    response: dict[str, Any] | None = None
    recalls: list[dict[str, Any]] = field(default_factory=list)
    tools_removed: list[dict[str, Any]] = field(default_factory=list)  # left out by translation
    observed: bool = False  # observe mode: the view is what would have been sent
    cache: dict[str, Any] = field(default_factory=dict)  # cached_tokens, cache_cause, cache_lost
    path: str | None = None  # the store's path for the exchange (store/paths.py)


def observe(metrics: Metrics | None, x: FinishedExchange, *, log_content: bool) -> None:
    """Count the exchange and write its access-log line. Never raises into the request."""
    try:
        if metrics is not None:
            _count(metrics, x)
        access_log.write(x, log_content)
    except Exception:  # observing must never fail the exchange it observes
        logging.getLogger("ctxproxy").exception("observing an exchange failed")


def _count(m: Metrics, x: FinishedExchange) -> None:
    stream = "true" if x.stream else "false"
    m.chat_requests.labels(x.upstream, str(x.status), stream).inc()
    m.chat_latency.labels(x.upstream, stream).observe(x.latency_s)
    if x.stream and x.ttft_s is not None:
        m.ttft.labels(x.upstream).observe(x.ttft_s)
    if x.counted:  # a refused request sent nothing upstream
        m.tokens_original.labels(x.upstream).inc(x.tokens_original)
        m.tokens_compiled.labels(x.upstream).inc(x.tokens_compiled)
    for e in x.events:
        if e.replayed:
            continue
        phase = "" if e.phase is None else str(e.phase)
        m.compactions.labels(e.strategy, phase).inc()
        m.compaction_saved.labels(e.strategy, phase).inc(max(0, e.tokens_before - e.tokens_after))
    _count_cache(m, x)
    for call in x.recalls:
        m.recalls.labels(x.upstream, call["outcome"]).inc()
    if kind := upstream_error_kind(x.status, x.error):
        m.upstream_errors.labels(x.upstream, kind).inc()


def upstream_error_kind(status: int, error: dict[str, Any] | None) -> str | None:
    """None when the upstream answered well, or when the proxy itself refused the request."""
    error = error if isinstance(error, dict) else {}
    if error.get("type") == "upstream_error":  # the proxy's own UpstreamUnavailable/Timeout
        return str(error.get("code") or "error").removeprefix("upstream_")
    if error.get("code") == "context_length_exceeded":  # our budget refusal, not a fault
        return None
    if status >= 400:
        return f"http_{status}"
    return "stream" if error else None


class RequestMetrics:
    """ASGI middleware: every HTTP request by method, route template and status, and its time."""

    def __init__(self, app: ASGIApp, metrics: Metrics) -> None:
        self.app, self.metrics = app, metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started, status = time.monotonic(), 500

        async def sending(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, sending)
        finally:
            route = scope.get("route")
            # The template, never the raw path: raw paths would be unbounded label values.
            name = getattr(route, "path", None) or "unmatched"
            method = scope.get("method", "")
            self.metrics.http_requests.labels(method, name, str(status)).inc()
            self.metrics.http_latency.labels(method, name).observe(time.monotonic() - started)


def _count_cache(m: Metrics, x: FinishedExchange) -> None:
    """The cache as the upstream saw it, and compaction's net saving (exchange/cache.py)."""
    if x.cache.get("cached_tokens") is not None:
        m.cached_tokens.labels(x.upstream).inc(x.cache["cached_tokens"])
    if not x.counted or x.status >= 400:
        return
    mode = "observe" if x.observed else "compact"
    lost, cause = x.cache.get("cache_lost") or 0, x.cache.get("cache_cause")
    if cause:
        m.cache_lost.labels(x.upstream, cause, mode).inc(lost)
    charged = lost if cause == "firing" else 0  # the client's and the server's own are not
    m.net_saved.labels(x.upstream, mode).inc(x.tokens_original - x.tokens_compiled - charged)
