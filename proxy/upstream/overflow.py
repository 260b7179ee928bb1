"""Recognising an upstream's "prompt too long" answer, whichever server wrote it."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

_LIMIT = re.compile(r"maximum context length is (\d+)")
# Most specific first: vLLM's "requested N tokens (M in the messages…)" counts the completion too.
_PROMPT = [
    re.compile(p)
    for p in (
        r"(\d+) in the messages",
        r"has (\d+) input tokens",
        r"messages resulted in (\d+) tokens",
        r"requested (\d+) tokens",
    )
]


@dataclass(frozen=True)
class Overflow:
    prompt_tokens: int | None  # what the upstream counted for the prompt, when it says
    window: int | None


def parse_overflow(status: int, body: bytes) -> Overflow | None:
    """llama.cpp's exceed_context_size_error, vLLM's and OpenAI's wording, or None."""
    if status not in (400, 413, 422):
        return None
    try:
        data = json.loads(body)
    except ValueError:
        return None
    if not isinstance(data, dict):
        return None
    err = data.get("error", data)  # vLLM's ErrorResponse has its fields at the top level
    if isinstance(err, str):  # some servers answer {"error": "message"}
        err = {"message": err}
    if not isinstance(err, dict):
        return None
    if err.get("type") == "exceed_context_size_error":
        return Overflow(_int(err.get("n_prompt_tokens")), _int(err.get("n_ctx")))
    message = str(err.get("message", ""))
    limit = _LIMIT.search(message)
    if limit is None and err.get("code") != "context_length_exceeded":
        return None
    found = (p.search(message) for p in _PROMPT)
    needed = next((int(m.group(1)) for m in found if m), None)
    return Overflow(needed, int(limit.group(1)) if limit else None)


def _int(value: object) -> int | None:
    return value if isinstance(value, int) else None
