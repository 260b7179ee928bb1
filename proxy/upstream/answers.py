"""Whether an upstream's complete answer to a chat request is one a client can use."""

from __future__ import annotations

import json
from typing import Any

import httpx

from proxy.errors import UpstreamInvalid


def check(r: httpx.Response, upstream: str, stream: bool) -> None:
    """Raise 502 upstream_invalid_response for a success that is not a chat completion.

    Error statuses pass as they came (the client reads the upstream's own error); a streaming
    request reaches here only when its answer was not an event stream.
    """
    if r.status_code >= 400:
        return
    ctype = r.headers.get("content-type", "no content type")
    if stream:
        raise UpstreamInvalid(
            f"Upstream '{upstream}' answered a streaming request with {ctype[:60]}, "
            "not an event stream"
        )
    try:
        data = json.loads(r.content)
    except ValueError:
        data = None
    if not is_completion(data):
        raise UpstreamInvalid(
            f"Upstream '{upstream}' answered with something that is not a chat completion "
            f"({ctype[:60]}, {len(r.content)} bytes)"
        )


def is_completion(data: Any) -> bool:
    if not isinstance(data, dict):
        return False
    choices = data.get("choices")
    return (
        isinstance(choices, list)
        and bool(choices)
        and all(isinstance(c, dict) and isinstance(c.get("message"), dict) for c in choices)
    )
