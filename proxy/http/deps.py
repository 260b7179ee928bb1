"""Injected things for handlers: the app's services, the client key check, the request body."""

from __future__ import annotations

import base64
import binascii
import hmac
from typing import TYPE_CHECKING, Annotated, Any

from fastapi import Depends, Request
from starlette.requests import ClientDisconnect

from proxy import sizes
from proxy.errors import PayloadTooLarge, Unauthorized, UnsupportedMediaType
from proxy.exchange.disconnect import ClientClosed
from proxy.exchange.observing import RAW_BODY
from proxy.formats.chat import parse_json
from proxy.offload import hop
from proxy.sessions.owners import client_token

if TYPE_CHECKING:
    from proxy.services import Services


def _services(request: Request) -> Services:
    return request.app.state.services  # type: ignore[no-any-return]  # starlette's state is untyped


# FastAPI reads this annotation at run time, where proxy.app would be an import cycle (app.py
# imports the routes): the checker sees Services, the running app the same object as Any.
if TYPE_CHECKING:
    ServicesDep = Annotated[Services, Depends(_services)]
else:
    ServicesDep = Annotated[Any, Depends(_services)]


def basic_password(request: Request) -> str | None:
    """The password of HTTP Basic auth: how a browser following a plain link sends a key."""
    scheme, _, value = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() != "basic":
        return None
    try:
        _, _, password = base64.b64decode(value.strip(), validate=True).decode().partition(":")
    except (binascii.Error, UnicodeDecodeError):
        return None
    return password or None


def key_matches(given: str | None, allowed: list[str]) -> bool:
    if given is None:
        return False
    # Compare against every key so timing does not reveal which one (or whether any) matched.
    found = False
    for key in allowed:
        found |= hmac.compare_digest(given.encode(), key.encode())
    return found


def require_client_key(request: Request, services: ServicesDep) -> None:
    keys = services.settings.api_keys
    if keys and not key_matches(client_token(request), keys):
        raise Unauthorized(
            "Missing or invalid API key (Authorization: Bearer, or the x-api-key header)"
        )


ClientAuth = Depends(require_client_key)


async def read_body(request: Request, limit: int) -> bytes:
    """The raw body, refused with 413 as soon as it passes `limit` bytes."""
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > limit:
        raise PayloadTooLarge(f"Request body is over the {limit}-byte limit")
    chunks, size = [], 0
    try:
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                raise PayloadTooLarge(f"Request body is over the {limit}-byte limit")
            chunks.append(chunk)
    except ClientDisconnect:  # gone mid-body (or closed as too slow): an answer no one reads
        raise ClientClosed("The client closed its connection while sending the body") from None
    return b"".join(chunks)


def require_json(request: Request) -> None:
    """415 unless the body is declared JSON: a browser page can send text/plain, a form or no
    type at all to another origin without asking first, but not application/json."""
    ctype = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if ctype != "application/json" and not (
        ctype.startswith("application/") and ctype.endswith("+json")
    ):
        raise UnsupportedMediaType(
            f"Content-Type must be application/json, not '{ctype[:60] or 'none'}'"
        )


async def json_body(request: Request, services: ServicesDep) -> dict[str, Any]:
    require_json(request)
    raw = await read_body(request, services.settings.max_body_bytes)
    request.scope[RAW_BODY] = raw  # observe mode forwards these very bytes
    if len(raw) > sizes.PARSE_OFF_LOOP_BYTES:
        return await hop(parse_json, raw)
    return parse_json(raw)


JsonBody = Annotated[dict[str, Any], Depends(json_body)]
