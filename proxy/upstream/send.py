"""Talking to model servers: sending requests and reading their answers."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncGenerator, AsyncIterator, Mapping
from functools import lru_cache
from json import dumps as json_dumps
from typing import Any

import anyio
import httpx
import orjson

from proxy import sizes
from proxy.errors import (
    BadRequest,
    ProxyError,
    UpstreamInvalid,
    UpstreamTimeout,
    UpstreamTooLarge,
    UpstreamUnavailable,
    sse_error,
)
from proxy.settings import Upstream
from proxy.upstream.aiotransport import Parts
from proxy.upstream.pools import UpstreamClient
from proxy.upstream.transport import MalformedAnswer
from strategies.prefix import Encoded, as_data, as_json

log = logging.getLogger("ctxproxy.upstream")

# What of an upstream's answer headers reaches the client: its type and what a client acts on.
# Cookies, hop-by-hop and length headers, server internals and forged X-Ctxproxy-* stay here.
_PASSED_RESPONSE_HEADERS = {
    "content-type",
    "retry-after",
    "x-request-id",
    "request-id",
    "openai-model",
    "openai-processing-ms",
    "openai-version",
}
_PASSED_RESPONSE_PREFIXES = ("x-ratelimit-",)


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
    return {
        k: v
        for k, v in r.headers.items()
        if k.lower() in _PASSED_RESPONSE_HEADERS or k.lower().startswith(_PASSED_RESPONSE_PREFIXES)
    }


def is_event_stream(r: httpx.Response) -> bool:
    return "text/event-stream" in r.headers.get("content-type", "")


@lru_cache(maxsize=1024)
def parsed(url: str) -> httpx.URL:
    """A URL parsed once: httpx's parse costs a tenth of a millisecond a request."""
    return httpx.URL(url)


def within_base(url: httpx.URL, upstream: Upstream) -> bool:
    """Whether a URL built for an upstream stays under its base_url (httpx resolves `..`)."""
    base = parsed(upstream.base_url)
    inside = url.raw_path.split(b"?")[0].startswith(base.raw_path.rstrip(b"/") + b"/")
    return inside and (url.scheme, url.host, url.port) == (base.scheme, base.host, base.port)


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
    headers: Mapping[str, str] | None = None,
) -> httpx.Response:
    """Send one request; transport failures become 502/504 ProxyErrors. `headers` are the
    client's that the API needs passed along (anthropic-version, anthropic-beta)."""
    headers = {**(headers or {}), **request_headers(upstream)}
    url = upstream.base_url + path
    body: bytes | Parts | None = content
    if json is not None:  # a long history's bytes go as they were made (encode_parts)
        parts, json = encode_parts(json), None
        body = parts[0] if len(parts) == 1 else Parts(parts)
    if body is not None:
        headers["content-type"] = "application/json"
    deadline = asyncio.get_running_loop().time() + upstream.total_timeout
    target = parsed(url) if params is None else url
    pool = client.direct(parsed(upstream.base_url)) if isinstance(client, UpstreamClient) else None
    if pool is None:
        timeout = timeout_for(upstream)
        whole = b"".join(body.parts) if isinstance(body, Parts) else body
        req = client.build_request(
            method, target, content=whole, params=params, headers=headers, timeout=timeout
        )
        req.extensions[DEADLINE] = deadline
    else:  # aiohttp's pool, without httpx's client (auth, cookies, redirects, hooks) in between
        headers = {**DIRECT_HEADERS, **headers}
        extensions = {"timeout": timeout_for(upstream).as_dict(), DEADLINE: deadline}
        req = httpx.Request(method, target, params=params, extensions=extensions)
    if not within_base(req.url, upstream):
        raise BadRequest("Invalid path: it leaves the upstream's base URL", param="path")
    try:
        async with asyncio.timeout(upstream.total_timeout):
            if pool is None:
                return await client.send(req, stream=stream)
            r = await pool.open(req, body, headers)
            if not stream:
                try:
                    await r.aread()
                except BaseException:
                    await r.aclose()
                    raise
            return r
    except TimeoutError:
        raise over_deadline(upstream) from None
    except httpx.PoolTimeout:
        raise UpstreamTimeout(
            f"Upstream '{upstream.name}' is busy: all {upstream.max_connections} of its "
            "connections are in use"
        ) from None
    except httpx.TimeoutException as exc:
        raise UpstreamTimeout(
            f"Upstream '{upstream.name}' did not answer {method} {url} in time ({describe(exc)})"
        ) from None
    except httpx.RemoteProtocolError as exc:
        if str(exc).startswith(DISCONNECTED):
            raise unreachable(upstream, method, url, exc) from None
        raise malformed(upstream, exc) from None
    except httpx.HTTPError as exc:
        raise unreachable(upstream, method, url, exc) from None


async def ask(
    client: httpx.AsyncClient,
    upstream: Upstream,
    path: str,
    body: dict[str, Any],
    *,
    window: int | None,
    headers: Mapping[str, str] | None = None,
) -> httpx.Response:
    """The one way a request for an answer (chat completions, Messages, Responses; recall
    rounds too) reaches a model server, with what that upstream needs for the `window` the
    view was compiled for; the answer comes back unread, for the caller to stream or read."""
    outgoing = for_window(upstream, body, window)
    return await send(client, upstream, "POST", path, json=outgoing, headers=headers, stream=True)


def for_window(upstream: Upstream, body: dict[str, Any], window: int | None) -> dict[str, Any]:
    """`body` as `upstream` must get it to use the whole window (a copy, where that differs)."""
    options = body.get("options")
    if upstream.kind == "ollama" and window and isinstance(options, dict | None):
        # Ollama silently truncates to its num_ctx: make it the window we compiled for.
        return {**body, "options": {"num_ctx": window, **(options or {})}}
    return body


# What httpx's client adds to every request, on the direct path too (aiohttp adds none of them)
DIRECT_HEADERS = {"accept": "*/*", "user-agent": f"python-httpx/{httpx.__version__}"}


DISCONNECTED = "Server disconnected"  # httpcore's words for a close before any answer


def unreachable(upstream: Upstream, method: str, url: str, exc: httpx.HTTPError) -> ProxyError:
    return UpstreamUnavailable(
        f"Upstream '{upstream.name}' is unreachable: {method} {url} failed with "
        f"{describe(exc)}. Is the model server running there?"
    )


def encode_json(data: Any) -> bytes:
    """What httpx's `json=` sends (compact, UTF-8), made by orjson: several times faster on a
    long history. Integers past 64 bits and lone surrogates take the standard encoder."""
    try:
        return orjson.dumps(data, default=as_json)
    except orjson.JSONEncodeError:
        text = json_dumps(
            data, ensure_ascii=False, separators=(",", ":"), allow_nan=False, default=as_data
        )
        return text.encode("utf-8")


# Not JSON anywhere in orjson's output (a string's NUL is escaped): marks where a history's
# bytes go in the JSON of the rest of a body.
_HOLE = b"\x00"


def encode_parts(data: Any) -> list[bytes]:
    """encode_json(data), as the buffers it is made of: a long history's bytes this request
    made already (Encoded) between the JSON before and after them, not copied into one
    buffer. A shorter body goes as one buffer, in one write."""
    made = [k for k, v in data.items() if isinstance(v, Encoded)] if isinstance(data, dict) else []
    if len(made) == 1 and len(data[made[0]].data) >= sizes.PARTS_FROM:
        try:
            rest = orjson.dumps({**data, made[0]: orjson.Fragment(_HOLE)})
        except orjson.JSONEncodeError:  # the standard encoder decides (encode_json)
            return [encode_json(data)]
        before, hole, after = rest.partition(_HOLE)
        if hole and _HOLE not in after:
            return [before, data[made[0]].data, after]
    return [encode_json(data)]


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


DEADLINE = "ctxproxy_deadline"  # request extension: when the whole answer must have ended


def over_deadline(upstream: Upstream) -> UpstreamTimeout:
    return UpstreamTimeout(
        f"Upstream '{upstream.name}' did not finish its answer within "
        f"total_timeout ({upstream.total_timeout:g} s)"
    )


def remaining(r: httpx.Response) -> float:
    deadline = r.request.extensions.get(DEADLINE)
    return float("inf") if deadline is None else deadline - asyncio.get_running_loop().time()


def malformed(upstream: Upstream, exc: httpx.HTTPError) -> UpstreamInvalid:
    return UpstreamInvalid(f"Upstream '{upstream.name}' sent a malformed answer: {str(exc)[:200]}")


def too_large(upstream: Upstream) -> UpstreamTooLarge:
    return UpstreamTooLarge(
        f"Upstream '{upstream.name}' sent an answer over max_response_bytes "
        f"({upstream.max_response_bytes} bytes)"
    )


async def read(r: httpx.Response, upstream: Upstream) -> bytes:
    """The rest of a streamed response's body, at most max_response_bytes; one cut short,
    stalled or too large becomes a 502 or 504. Read once; later calls return the same."""
    if r.is_stream_consumed:
        return r.content
    try:
        left = remaining(r)  # asyncio's own timeout: anyio's looks up the async library each time
        async with asyncio.timeout(None if left == float("inf") else max(0.0, left)):
            parts, size = [], 0
            async for part in r.aiter_raw():
                size += len(part)
                if size > upstream.max_response_bytes:
                    raise too_large(upstream)
                parts.append(part)
            r._content = b"".join(parts)  # what aread() would have set: r.content, r.json()
            return r._content
    except TimeoutError:
        raise over_deadline(upstream) from None
    except httpx.TimeoutException:
        raise UpstreamTimeout(f"Upstream '{upstream.name}' stopped sending its answer") from None
    except MalformedAnswer as exc:
        raise malformed(upstream, exc) from None
    except httpx.HTTPError as exc:
        raise UpstreamUnavailable(
            f"Upstream '{upstream.name}' cut its answer short: {type(exc).__name__}"
        ) from None
    finally:
        with anyio.CancelScope(shield=True):
            await r.aclose()


async def stream_body(r: httpx.Response, upstream: Upstream) -> AsyncIterator[bytes]:
    """Yield the upstream's bytes as they arrive; a failure mid-stream ends in an SSE error."""
    async for part in body_parts(r, upstream):
        yield sse_error(part) if isinstance(part, ProxyError) else part


async def body_parts(
    r: httpx.Response, upstream: Upstream
) -> AsyncGenerator[bytes | ProxyError, None]:
    """The upstream's bytes as they arrive, then the error that ended them early, if any."""
    size = 0
    try:
        async for chunk in r.aiter_raw():
            size += len(chunk)
            if remaining(r) < 0:  # a trickle, or keep-alive comments that never end
                yield over_deadline(upstream)
                return
            if size > upstream.max_response_bytes:
                yield too_large(upstream)
                return
            yield chunk
    except httpx.TimeoutException:
        yield UpstreamTimeout(f"Upstream '{upstream.name}' stalled mid-stream")
    except MalformedAnswer as exc:
        yield malformed(upstream, exc)
    except httpx.HTTPError as exc:
        yield UpstreamUnavailable(
            f"Upstream '{upstream.name}' failed mid-stream: {type(exc).__name__}"
        )
    finally:
        with anyio.CancelScope(shield=True):  # a client disconnect cancels us: still let go
            await r.aclose()
