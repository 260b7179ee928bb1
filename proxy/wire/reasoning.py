"""An upstream's reasoning (llama.cpp's `reasoning_content`, vLLM's `reasoning`) in each API's
form: an Anthropic thinking block, a Responses reasoning item."""

from __future__ import annotations

import uuid
from typing import Any

FIELDS = ("reasoning_content", "reasoning")  # llama.cpp and older vLLM; newer vLLM


def reasoning_of(msg: Any) -> str:
    """A chat message's or delta's reasoning text ("" when it has none)."""
    if not isinstance(msg, dict):
        return ""
    for name in FIELDS:
        if isinstance(msg.get(name), str) and msg[name]:
            return msg[name]
    return ""


def thinking_block(text: str) -> dict[str, Any]:
    # No signature: it was not made by Anthropic, and nothing upstream of a translation checks it.
    return {"type": "thinking", "thinking": text, "signature": ""}


def reasoning_item(text: str, status: str = "completed") -> dict[str, Any]:
    return {
        "type": "reasoning",
        "id": "rs_" + uuid.uuid4().hex[:24],
        "status": status,
        "summary": [],
        "content": [{"type": "reasoning_text", "text": text}],
    }
