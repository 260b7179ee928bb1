"""What `ctxproxy serve` checks and says before it starts: the port, the database, each upstream."""

from __future__ import annotations

import asyncio
import errno
import socket
from dataclasses import dataclass

import httpx

from proxy.settings import Settings, Upstream
from proxy.upstream import send as up
from proxy.upstream.windows import discover

PROBE_TIMEOUT = 3.0  # seconds: a start-up report, not a health check; a slow server is "slow"


class PortUnavailable(Exception):
    """The address to listen on cannot be bound; the message names host and port."""


def check_port(host: str, port: int) -> None:
    """Bind and release the address as uvicorn will (SO_REUSEADDR), so a port in use is
    reported before anything else (the database) is touched."""
    if port == 0:
        return
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        raise PortUnavailable(f"cannot listen on {host}:{port}: {exc.strerror}") from None
    family, kind, proto, _, address = infos[0]
    with socket.socket(family, kind, proto) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(address)
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise PortUnavailable(
                    f"port {port} on {host} is already in use (another ctxproxy or server is "
                    "listening there); stop it, or choose another port with --port or "
                    "listen.port in the config"
                ) from None
            raise PortUnavailable(f"cannot listen on {host}:{port}: {exc.strerror}") from None


@dataclass(frozen=True)
class UpstreamReport:
    upstream: Upstream
    answered: bool
    detail: str  # "models: a, b" or why it did not answer
    window: int | None
    window_from: str  # "configured", "discovered", or why unknown

    def line(self) -> str:
        u = self.upstream
        state = f"answered ({self.detail})" if self.answered else f"NOT ANSWERING ({self.detail})"
        if self.window:
            window = f"window {self.window:,} tokens ({self.window_from})"
        else:
            window = f"window unknown ({self.window_from})"
        return f"upstream   {u.name} ({u.kind}) at {u.base_url}: {state}; {window}"


async def probe(upstream: Upstream, client: httpx.AsyncClient) -> UpstreamReport:
    try:
        r = await client.get(
            upstream.base_url + "/models",
            headers=up.request_headers(upstream),
            timeout=PROBE_TIMEOUT,
        )
    except httpx.HTTPError as exc:
        answered, detail = False, up.describe(exc)
    else:
        answered = r.status_code < 500
        detail = _models(r) if r.status_code == 200 else f"HTTP {r.status_code} on /models"
    if upstream.context_window:
        return UpstreamReport(upstream, answered, detail, upstream.context_window, "configured")
    if not answered:
        return UpstreamReport(upstream, False, detail, None, "to be discovered once it answers")
    model = next((m for m in upstream.models if m != "*"), "")
    try:
        window = await discover(client, upstream, model)
    except httpx.HTTPError as exc:
        return UpstreamReport(upstream, True, detail, None, f"discovery: {up.describe(exc)}")
    except (ValueError, AttributeError, TypeError) as exc:  # an answer of another shape
        return UpstreamReport(upstream, True, detail, None, f"discovery: {exc!r:.120}")
    if window:
        return UpstreamReport(upstream, True, detail, window, "discovered")
    why = "set context_window" if upstream.kind == "openai" else "the server did not say"
    return UpstreamReport(upstream, True, detail, None, f"{why}; no compaction without it")


def _models(r: httpx.Response) -> str:
    try:
        data = r.json().get("data", [])
        ids = [m["id"] for m in data if isinstance(m, dict) and isinstance(m.get("id"), str)]
    except (ValueError, AttributeError):
        return "HTTP 200"
    if not ids:
        return "no models listed"
    more = f" and {len(ids) - 3} more" if len(ids) > 3 else ""
    return "models: " + ", ".join(ids[:3]) + more


def probe_all(settings: Settings) -> list[UpstreamReport]:
    async def run() -> list[UpstreamReport]:
        async with httpx.AsyncClient() as client:
            return list(await asyncio.gather(*(probe(u, client) for u in settings.upstreams)))

    return asyncio.run(run())


def listening_line(host: str, port: int, workers: int) -> str:
    if port == 0:
        return f"listening  on {host}, a free port the system picks (uvicorn names it below)"
    procs = f" · {workers} worker processes" if workers > 1 else ""
    where = ""
    if host in ("0.0.0.0", "::"):  # every interface: name the one a browser here can open
        where, host = f"on every interface, port {port}{procs}; from this machine ", "127.0.0.1"
        procs = ""
    shown = f"[{host}]" if ":" in host else host
    base = f"http://{shown}:{port}"
    return (
        f"listening  {where}{base}{procs}: OpenAI API at {base}/v1, session viewer at "
        f"{base}/ui/, health at /healthz and /readyz"
    )
