"""Responses' previous_response_id, served from the store: a response id names its exchange."""

from __future__ import annotations

import base64
import binascii
from typing import Any

from starlette.concurrency import run_in_threadpool

from proxy.errors import BadRequest
from proxy.store import Store

PREFIX = "resp_"
MAX_SEQ_DIGITS = 19  # 2^63 - 1 has 19
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
    # Forged ids reach here: a sequence is ASCII digits within a 64-bit column, and a session
    # id holds no control character (PostgreSQL refuses NUL), or it names no exchange.
    if not (seq.isascii() and seq.isdigit() and len(seq) <= MAX_SEQ_DIGITS):
        return None
    if not session or len(session) > 1024 or any(ord(c) < 32 for c in session):
        return None
    number = int(seq)
    return (session, number) if number < 2**63 else None


async def history(store: Store, response_id: str, owner: str | None) -> tuple[str, list[dict]]:
    """The session and neutral history that `response_id` ended: its request, then its answer."""
    found = _parse(response_id)
    if found and (owner is None or found[0].startswith(owner + ":")):
        session, number = found
        detail = await run_in_threadpool(store.get_exchange, session, number)
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
