"""Refuse requests a browser page could make on someone else's behalf: a Host header that names
no address of ours (DNS rebinding) is refused before any route runs."""

from __future__ import annotations

import ipaddress
import json

from starlette.types import ASGIApp, Receive, Scope, Send

from proxy.errors import BadRequest
from proxy.formats import anthropic


def host_allowed(host: str, allowed: list[str]) -> bool:
    """An IP literal (a rebinding page can only name a host it owns), `localhost`, or a name
    in `allowed_hosts` ("*" allows any)."""
    name = host.strip().lower()
    if name.startswith("["):
        name = name[1 : name.find("]")] if "]" in name else name
    elif name.count(":") == 1:
        name = name.rsplit(":", 1)[0]
    if not name or "*" in allowed or name in {a.lower() for a in allowed}:
        return True
    if name == "localhost" or name.endswith(".localhost"):
        return True
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


class HostGuard:
    """ASGI middleware: a 400, in the envelope of the API the path belongs to, for a Host header
    that is not allowed."""

    def __init__(self, app: ASGIApp, allowed: list[str]) -> None:
        self.app, self.allowed = app, allowed

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            host = host_of(scope)
            if not host_allowed(host, self.allowed):
                await refuse(send, host, scope["path"])
                return
        await self.app(scope, receive, send)


def host_of(scope: Scope) -> str:
    return dict(scope.get("headers") or []).get(b"host", b"").decode("latin-1")


async def refuse(send: Send, host: str, path: str) -> None:
    exc = BadRequest(
        f"Host '{host[:100]}' is not allowed: add it to allowed_hosts", code="invalid_host"
    )
    error = anthropic.proxy_error_body(exc) if anthropic.is_messages_path(path) else exc.body()
    body = json.dumps(error).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": exc.status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
