"""Talking to model servers: forwarding requests and relaying their answers."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Mapping
from typing import Any

import anyio
import httpx

from proxy.errors import ProxyError, UpstreamTimeout, UpstreamUnavailable, sse_error
from proxy.settings import Upstream

log = logging.getLogger("ctxproxy.upstream")

# Hop-by-hop and length headers are the transport's business, not the client's.
_DROP_RESPONSE_HEADERS = {
    "connection",
    "keep-alive",
    "transfer-encoding",
    "content-length",
    "content-encoding",
    "server",
    "date",
}


def timeout_for(upstream: Upstream) -> httpx.Timeout:
    return httpx.Timeout(
        connect=upstream.connect_timeout,
        read=upstream.read_timeout,
        write=upstream.read_timeout,
        pool=upstream.connect_timeout,
    )


def request_headers(upstream: Upstream) -> dict[str, str]:
    """Headers sent upstream: the upstream's own key from config, never the client's."""
    headers = {"accept-encoding": "identity"}
    if upstream.api_key:
        headers["authorization"] = f"Bearer {upstream.api_key}"
    return headers


def response_headers(r: httpx.Response) -> dict[str, str]:
    return {k: v for k, v in r.headers.items() if k.lower() not in _DROP_RESPONSE_HEADERS}


def is_event_stream(r: httpx.Response) -> bool:
    return "text/event-stream" in r.headers.get("content-type", "")


def server_root(upstream: Upstream) -> str:
    """The server's root URL: llama.cpp's /props and Ollama's /api/* live beside /v1."""
    base = upstream.base_url
    return base[: -len("/v1")] if base.endswith("/v1") else base


async def send(
    client: httpx.AsyncClient,
    upstream: Upstream,
    method: str,
    path: str,
    *,
    json: Any = None,
    content: bytes | None = None,
    params: Mapping[str, str] | None = None,
    stream: bool = False,
) -> httpx.Response:
    """Send one request; transport failures become 502/504 ProxyErrors."""
    headers = request_headers(upstream)
    url = upstream.base_url + path
    if content is not None:
        headers["content-type"] = "application/json"
    req = client.build_request(
        method,
        url,
        json=json,
        content=content,
        params=params,
        headers=headers,
        timeout=timeout_for(upstream),
    )
    try:
        return await client.send(req, stream=stream)
    except httpx.TimeoutException as exc:
        raise UpstreamTimeout(
            f"Upstream '{upstream.name}' did not answer {method} {url} in time ({describe(exc)})"
        ) from None
    except httpx.HTTPError as exc:
        raise UpstreamUnavailable(
            f"Upstream '{upstream.name}' is unreachable: {method} {url} failed with "
            f"{describe(exc)}. Is the model server running there?"
        ) from None


def describe(exc: httpx.HTTPError) -> str:
    """The exception's class and what the OS said: 'ConnectError: connection refused'."""
    if isinstance(exc, httpx.HTTPStatusError):
        return f"HTTP {exc.response.status_code} from {exc.request.url}"
    cause: BaseException | None = exc
    while cause is not None:  # anyio hides ECONNREFUSED under "All connection attempts failed"
        if isinstance(cause, ConnectionRefusedError):
            return f"{type(exc).__name__}: connection refused"
        cause = cause.__cause__ or cause.__context__
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


async def relay(r: httpx.Response, upstream: Upstream) -> AsyncIterator[bytes]:
    """Yield the upstream's bytes as they arrive; a failure mid-stream ends in an SSE error."""
    try:
        async for chunk in r.aiter_raw():
            yield chunk
    except httpx.TimeoutException:
        yield sse_error(UpstreamTimeout(f"Upstream '{upstream.name}' stalled mid-stream"))
    except httpx.HTTPError as exc:
        err: ProxyError = UpstreamUnavailable(
            f"Upstream '{upstream.name}' failed mid-stream: {type(exc).__name__}"
        )
        yield sse_error(err)
    finally:
        with anyio.CancelScope(shield=True):  # a client disconnect cancels us: still let go
            await r.aclose()
