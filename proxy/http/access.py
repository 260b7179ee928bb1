"""Who may read the audit API, /ui and /metrics, and which sessions each one sees.

The admin key sees everything. With `api_keys` set, a client key sees only the sessions its
own requests made. With neither key configured, a client connected directly over loopback is
the operator; a request that came through a proxy (it carries forwarding headers) never is,
whatever address those headers or the proxy's own socket claim.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, Request

from proxy.errors import Forbidden, NotFound, Unauthorized
from proxy.http.deps import ServicesDep, basic_password, key_matches
from proxy.sessions.owners import client_token, key_id
from proxy.settings import Settings

FORWARDING_HEADERS = ("forwarded", "x-forwarded-for", "x-forwarded-host", "x-real-ip")


@dataclass(frozen=True)
class Viewer:
    key_id: str | None  # None: the operator, who sees every session

    @property
    def admin(self) -> bool:
        return self.key_id is None

    def require_admin(self) -> None:
        if not self.admin:
            raise Forbidden("Only the admin key may read this")

    def check_owner(self, owner: str | None, session_id: str) -> None:
        """404 rather than 403 for another key's session: its existence is not this key's."""
        if not self.admin and owner != self.key_id:
            raise NotFound(f"No session '{session_id}'", param="session_id")


def is_loopback(host: str | None) -> bool:
    try:
        ip = ipaddress.ip_address(host or "")
    except ValueError:
        return False
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip.is_loopback


def direct_loopback(request: Request) -> bool:
    forwarded = any(h in request.headers for h in FORWARDING_HEADERS)
    return not forwarded and is_loopback(request.client.host if request.client else None)


def is_operator(request: Request, settings: Settings) -> bool:
    """Whether a client request comes from the operator: with the admin key (as its client
    key), or, with no keys configured, directly over loopback."""
    if settings.admin_key is not None:
        return key_matches(client_token(request), [settings.admin_key])
    return not settings.api_keys and direct_loopback(request)


def audit_viewer(request: Request, services: ServicesDep) -> Viewer:
    settings = services.settings
    # A client key as the chat routes take it (Bearer or x-api-key), or a browser's password.
    given = client_token(request) or basic_password(request)
    if settings.admin_key is not None and key_matches(given, [settings.admin_key]):
        return Viewer(None)
    if settings.api_keys and key_matches(given, settings.api_keys):
        return Viewer(key_id(given or ""))
    if settings.admin_key is not None or settings.api_keys:
        raise Unauthorized("Missing or invalid key in the Authorization header")
    if not direct_loopback(request):
        raise Forbidden(
            "The audit API answers clients connected directly over loopback only, unless "
            "admin_key or api_keys is set"
        )
    return Viewer(None)


ViewerDep = Annotated[Viewer, Depends(audit_viewer)]
