"""Responses' previous_response_id, served from the store: a response id names its exchange."""

from __future__ import annotations

import base64
import binascii
from typing import Any

from starlette.concurrency import run_in_threadpool

from proxy.errors import BadRequest

PREFIX = "resp_"
NO_STORE = "ctxproxy_store"  # in the stored request when the client sent store: false


def response_id(ref: Any) -> str:
    name = f"{ref.session_id}/{ref.seq}".encode()
    return PREFIX + base64.urlsafe_b64encode(name).decode().rstrip("=")


def _parse(response_id: str) -> tuple[str, int] | None:
    if not response_id.startswith(PREFIX):
        return None
    code = response_id[len(PREFIX) :]
    try:
        session, _, seq = (
            base64.urlsafe_b64decode(code + "=" * (-len(code) % 4)).decode().rpartition("/")
        )
    except (binascii.Error, UnicodeDecodeError, ValueError):
        return None
    return (session, int(seq)) if session and seq.isdigit() else None


async def history(store: Any, response_id: str, owner: str | None) -> tuple[str, list[dict]]:
    """The session and neutral history that `response_id` ended: its request, then its answer."""
    found = _parse(response_id)
    if found and (owner is None or found[0].startswith(owner + ":")):
        detail = await run_in_threadpool(store.get_exchange, *found)
        if (
            detail is not None
            and detail.response is not None
            and detail.request.get(NO_STORE) is not False
        ):
            return found[0], [*detail.request.get("messages", []), detail.response]
    raise BadRequest(
        f"previous_response_id '{response_id[:80]}' is not a stored response of ctxproxy (it "
        "was sent with store: false, failed, belongs to another key, or never existed): "
        "send the whole conversation in `input` instead",
        param="previous_response_id",
    )
