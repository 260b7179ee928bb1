"""A chat request's checks before the exchange starts: the wire shape and the tool-call
pairing, on a worker thread when the history is long, so the event loop never waits on it."""

from __future__ import annotations

from typing import Any

from starlette.concurrency import run_in_threadpool

from proxy.exchange import pairing
from proxy.formats.chat import ChatHead, chat_head

# Up to this many messages the checks take well under a millisecond: the thread hop would cost
# more than it saves.
OFF_LOOP_MESSAGES = 500


async def prepare(body: dict[str, Any], policy: str) -> tuple[ChatHead, dict[str, Any]]:
    """(what the exchange needs of the request, the body to compile and forward)."""
    messages = body.get("messages")
    if isinstance(messages, list) and len(messages) > OFF_LOOP_MESSAGES:
        return await run_in_threadpool(_checked, body, policy)
    return _checked(body, policy)


def _checked(body: dict[str, Any], policy: str) -> tuple[ChatHead, dict[str, Any]]:
    chat = chat_head(body)  # validated as parse_chat does, without a model per message
    # What is compiled and sent; `body` stays the raw request, stored as the client sent it.
    return chat, pairing.apply_policy(body, policy)
