"""Whose session: the client key a request came with, and the id that names it."""

from __future__ import annotations

import hashlib

from starlette.requests import Request


def bearer_token(request: Request) -> str | None:
    auth = request.headers.get("authorization", "")
    scheme, _, token = auth.partition(" ")
    return token.strip() if scheme.lower() == "bearer" and token.strip() else None


def client_token(request: Request) -> str | None:
    """The client key: a Bearer token, or Anthropic's x-api-key header."""
    return bearer_token(request) or request.headers.get("x-api-key") or None


def key_id(key: str) -> str:
    """What is stored and shown for a client key: a short hash that names it, never the key."""
    return "k" + hashlib.sha256(b"ctxproxy-key:" + key.encode()).hexdigest()[:16]


def client_key_id(request: Request, api_keys: list[str]) -> str | None:
    """The id of the (already checked) client key, or None when api_keys is unset."""
    token = client_token(request)
    return key_id(token) if api_keys and token else None
