"""Which session a request belongs to: header, path prefix, body field, or history fingerprint.

A fingerprint session is named by the leading messages (the system and developer messages before
the conversation starts, and the first user message), so an unmodified agent's turns land in one
session; a system message later in the history (a reminder that changes between turns) does
not count. Two conversations that share those leading
messages, or a client that rewinds or edits its history, share the session but not the history:
the store keeps histories as a tree and branches at the first message that differs, so nothing
stored is ever rewritten.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from itertools import takewhile
from typing import Any

from proxy.errors import BadRequest
from strategies.messages import canonical_json

_VALID = re.compile(r"[A-Za-z0-9._:@-]{1,128}")


@dataclass(frozen=True)
class SessionKey:
    id: str
    source: str  # header | path | body | fingerprint
    owner: str | None = None  # the client key's id, when api_keys is set


def identify(
    header: str | None, path: str | None, body: dict[str, Any], owner: str | None = None
) -> SessionKey:
    """The session; with a client key (`owner`, its id) the id is scoped by it, so that two
    keys never share a session, whether named or fingerprinted."""
    key = _identify(header, path, body)
    if owner is None:
        return key
    scoped = key.id if key.id.startswith(owner + ":") else f"{owner}:{key.id}"
    return SessionKey(scoped, key.source, owner)


def _identify(header: str | None, path: str | None, body: dict[str, Any]) -> SessionKey:
    metadata = body.get("metadata")
    from_body = metadata.get("session_id") if isinstance(metadata, dict) else None
    for value, source in ((header, "header"), (path, "path")):
        if value:
            return SessionKey(_checked(value, source), source)
    for value in (from_body, body.get("user")):
        if isinstance(value, str) and value:
            # Body fields are free text in OpenAI's API: name odd ones by hash rather than refuse.
            name = value if _VALID.fullmatch(value) else "u-" + _digest(value)
            return SessionKey(name, "body")
    return SessionKey("fp-" + fingerprint(body.get("messages") or []), "fingerprint")


def fingerprint(messages: list[dict[str, Any]]) -> str:
    lead = list(takewhile(lambda m: m.get("role") in ("system", "developer"), messages))
    first_user = next((m for m in messages if m.get("role") == "user"), None)
    return _digest(canonical_json([lead, first_user]))


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:24]


def _checked(value: str, source: str) -> str:
    if not _VALID.fullmatch(value):
        raise BadRequest(
            f"Invalid session id from {source}: use 1-128 characters of A-Z a-z 0-9 . _ : @ -",
            param="session_id",
        )
    return value
