"""A chat request's checks before the exchange starts: the wire shape and the tool-call
pairing, on a worker thread when the history is long, so the event loop never waits on it."""

from __future__ import annotations

from typing import Any

from proxy import sizes
from proxy.exchange import pairing
from proxy.exchange.privacy import without_identity
from proxy.formats.chat import ChatHead, chat_head
from proxy.offload import hop
from proxy.sessions import conversations


async def prepare(
    body: dict[str, Any], policy: str, identity: bool = False
) -> tuple[ChatHead, dict[str, Any]]:
    """(what the exchange needs of the request, the body to compile and forward); the client's
    identity fields go only with `identity` (they still name the session, from `body`)."""
    messages = body.get("messages")
    if isinstance(messages, list) and len(messages) > sizes.PREPARE_OFF_LOOP_MESSAGES:
        return await hop(_checked_ahead, body, policy, identity)
    return _checked(body, policy, identity)


def _checked_ahead(
    body: dict[str, Any], policy: str, identity: bool
) -> tuple[ChatHead, dict[str, Any]]:
    checked = _checked(body, policy, identity)
    conversations.reading(body)  # the session index's part, here rather than on the loop
    return checked


def _checked(body: dict[str, Any], policy: str, identity: bool) -> tuple[ChatHead, dict[str, Any]]:
    chat = chat_head(body)  # validated as parse_chat does, without a model per message
    # What is compiled and sent; `body` stays the raw request, stored as the client sent it.
    sendable = pairing.apply_policy(body, policy)
    return chat, sendable if identity else without_identity(sendable)
