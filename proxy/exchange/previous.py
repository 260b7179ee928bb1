"""Responses' previous_response_id, served from the store: a response id names its exchange.

An id is `resp_` and the base64 of a MAC of `session/seq` and that name enciphered under the
MAC (HMAC-SHA256 as the PRF, SIV-style), keyed by the install's secret kept in the store: nobody
can forge an id, so a stranger cannot load a session's history by naming it, and an id does not
show which session it was filed in (a side request joined to one is not told which). The name
also says whether the exchange's client was told its session: a request continued from an id is
told it only if that one was. With client keys, an id of another key's session is refused too.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
from typing import Any

from proxy.errors import BadRequest
from proxy.offload import hop
from proxy.sessions.identify import SessionKey
from proxy.store import Store

PREFIX = "resp_"
MAX_SEQ_DIGITS = 19  # 2^63 - 1 has 19
NO_STORE = "ctxproxy_store"  # in the stored request when the client sent store: false
# In the stored request of an observed turn continued from an id the upstream made.
UPSTREAM_PREVIOUS = "ctxproxy_upstream_previous_response_id"
MAC_BYTES = 16
UNTOLD = "~"  # after the sequence: the exchange's client was not told its session
CONTINUED, UNTOLD_SOURCE = "previous", "side"  # the sources of a session found by an id


def response_id(ref: Any, key: bytes, told: bool = True) -> str:
    name = f"{ref.session_id}/{ref.seq}{'' if told else UNTOLD}".encode()
    mac = _prf(key, b"mac", name)[:MAC_BYTES]
    sealed = mac + _xor(name, _stream(key, mac, len(name)))
    return PREFIX + base64.urlsafe_b64encode(sealed).decode().rstrip("=")


def _prf(key: bytes, purpose: bytes, data: bytes) -> bytes:
    return hmac.new(key, purpose + b"\0" + data, hashlib.sha256).digest()


def _stream(key: bytes, mac: bytes, length: int) -> bytes:
    blocks = (length + 31) // 32
    return b"".join(_prf(key, b"enc", mac + i.to_bytes(4, "big")) for i in range(blocks))


def _xor(data: bytes, stream: bytes) -> bytes:
    return bytes(a ^ b for a, b in zip(data, stream, strict=False))


def _parse(response_id: str, key: bytes) -> tuple[str, int, bool] | None:
    if not response_id.startswith(PREFIX) or len(response_id) > 4096:
        return None
    code = response_id[len(PREFIX) :]
    try:
        signed = base64.urlsafe_b64decode(code + "=" * (-len(code) % 4))
    except (binascii.Error, ValueError):
        return None
    mac, sealed = signed[:MAC_BYTES], signed[MAC_BYTES:]
    name = _xor(sealed, _stream(key, mac, len(sealed)))
    if not hmac.compare_digest(mac, _prf(key, b"mac", name)[:MAC_BYTES]):
        return None  # forged, altered, or made by another install
    try:
        session, _, seq = name.decode().rpartition("/")
    except UnicodeDecodeError:
        return None
    told = not seq.endswith(UNTOLD)
    seq = seq.removesuffix(UNTOLD)
    # Only ids this install signed reach here; still, a sequence is ASCII digits within a 64-bit
    # column, and a session id holds no control character (PostgreSQL refuses NUL).
    if not (seq.isascii() and seq.isdigit() and len(seq) <= MAX_SEQ_DIGITS):
        return None
    if not session or len(session) > 1024 or any(ord(c) < 32 for c in session):
        return None
    number = int(seq)
    return (session, number, told) if number < 2**63 else None


async def ours(store: Store, response_id: str) -> bool:
    """Whether `response_id` is one this install made (whatever it names)."""
    return _parse(response_id, await hop(store.ids_key)) is not None


async def history(
    store: Store, response_id: str, owner: str | None
) -> tuple[SessionKey, list[dict]]:
    """The session that `response_id` ended, told as that exchange's was (`told_id`), and its
    neutral history: its request, then its answer."""
    found = _parse(response_id, await hop(store.ids_key))
    if found and (owner is None or found[0].startswith(owner + ":")):
        session, number, told = found
        detail = await hop(store.get_exchange, session, number)
        if (
            detail is not None
            and detail.response is not None
            and detail.request.get(NO_STORE) is not False
        ):
            key = SessionKey(session, CONTINUED if told else UNTOLD_SOURCE, owner)
            return key, [*detail.request.get("messages", []), detail.response]
    raise BadRequest(
        f"previous_response_id '{response_id[:80]}' is not a stored response of ctxproxy (it "
        "was sent with store: false, failed, belongs to another key, or never existed): "
        "send the whole conversation in `input` instead",
        param="previous_response_id",
    )
