"""Anthropic Messages <-> the neutral form: requests, answers and errors.

A `tool_use` block becomes an assistant tool call and its `tool_result` a `tool` message, so
pairing and compaction treat them like OpenAI's. thinking/redacted_thinking blocks have no
neutral form: they travel in the client's raw message, which goes out as it came unless
compaction changed that message (an old turn, where the API ignores thinking anyway)."""

from __future__ import annotations

import json
import uuid
from typing import Any

from proxy.errors import BadRequest, ContextLengthExceeded, ProxyError
from proxy.formats import shapes, tools
from proxy.formats.groups import Conversion, Group, restore, split_head, text_of
from proxy.formats.reasoning import reasoning_of, thinking_block
from proxy.formats.seen import Fixed, Seen
from proxy.formats.toolnames import REMOVED_KEY

API = "messages"
STOP_REASONS = {"stop": "end_turn", "length": "max_tokens", "tool_calls": "tool_use"}
# Copied into the neutral request when present; the rest stays in the raw request only.
_PASSED = ("model", "max_tokens", "temperature", "top_p", "top_k", "stream")
SEEN = Seen("seen.anthropic")  # messages already converted: a session resends them every turn
# The system prompt and tools, checked and converted once: (the head's text, chat tools, notes
# of the server tools left out), shared by the requests that send them (never changed).
FIXED: Fixed[tuple[str | None, list[dict[str, Any]] | None, list[dict[str, Any]]]] = Fixed(
    "seen.anthropic.fixed"
)


def to_neutral(raw: dict[str, Any]) -> Conversion:
    messages = raw.get("messages")
    if not isinstance(messages, list) or not messages:
        raise BadRequest("messages: at least one message is required", param="messages")
    shapes.anthropic_fields(raw)
    fixed, unseen = FIXED.convert((raw.get("system"), raw.get("tools")), _fixed)
    shapes.anthropic_choice(raw)
    body: dict[str, Any] = {k: raw[k] for k in _PASSED if k in raw}
    neutral: list[dict[str, Any]] = []
    groups: list[Group] = []
    head = None
    if fixed[0] is not None:
        head = {"role": "system", "content": fixed[0]}
        neutral.append(head)
    converted, new = SEEN.convert_all(messages, _checked_message)
    for msg, one in zip(messages, converted, strict=True):
        groups.append(Group([msg], one))
        neutral.extend(one)
    body["messages"] = neutral
    _options(raw, body, fixed[1:])
    return Conversion(body, raw, groups, head, unseen=unseen + new)


def _fixed(
    parts: tuple[Any, Any],
) -> tuple[str | None, list[dict[str, Any]] | None, list[dict[str, Any]]]:
    system, client_tools = parts
    shapes.anthropic_fixed(system, client_tools)
    text = text_of(_parts(system)) if system else None
    return text, tools.anthropic_tools(client_tools), tools.anthropic_server_tools(client_tools)


def _options(
    raw: dict[str, Any],
    body: dict[str, Any],
    converted: tuple[list[dict[str, Any]] | None, list[dict[str, Any]]],
) -> None:
    chat_tools, removed = converted
    if isinstance(raw.get("stop_sequences"), list):
        body["stop"] = raw["stop_sequences"]
    if chat_tools:
        body["tools"] = list(chat_tools)  # its own list: the definitions are FIXED's
        choice, parallel = tools.anthropic_tool_choice(raw.get("tool_choice"))
        if choice is not None:
            body["tool_choice"] = choice
        if parallel is not None:
            body["parallel_tool_calls"] = parallel
    if removed:
        body[REMOVED_KEY] = list(removed)
    metadata = raw.get("metadata")
    if isinstance(metadata, dict) and isinstance(metadata.get("user_id"), str):
        body["user"] = metadata["user_id"]  # Claude Code's is per session: it names the session
    if raw.get("stream"):
        body["stream_options"] = {"include_usage": True}


def _parts(content: Any) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return [b for b in content if isinstance(b, dict)] if isinstance(content, list) else []


def _checked_message(msg: Any, i: int) -> list[dict[str, Any]]:
    shapes.anthropic_message(msg, i)
    return message_to_neutral(msg)


def message_to_neutral(msg: dict[str, Any]) -> list[dict[str, Any]]:
    content = msg.get("content")
    if msg["role"] == "system":  # mid-conversation (beta mid-conversation-system-2026-04-07)
        return [{"role": "system", "content": text_of(_parts(content))}]
    if msg["role"] == "assistant":
        return [_assistant(content)]
    if isinstance(content, str):
        return [{"role": "user", "content": content}]
    blocks = _parts(content)
    out = [_tool_result(b) for b in blocks if b.get("type") == "tool_result"]
    rest = [p for b in blocks if b.get("type") != "tool_result" for p in _user_part(b)]
    if rest or not out:
        out.append({"role": "user", "content": _compact(rest)})
    return out


def _assistant(content: Any) -> dict[str, Any]:
    blocks = _parts(content)
    text = "".join(b.get("text", "") for b in blocks if b.get("type") == "text")
    msg: dict[str, Any] = {"role": "assistant", "content": text or None}
    calls = [
        {
            "id": b.get("id", ""),
            "type": "function",
            "function": {"name": b.get("name", ""), "arguments": json.dumps(b.get("input", {}))},
        }
        for b in blocks
        if b.get("type") == "tool_use"
    ]
    if calls:
        msg["tool_calls"] = calls
    elif msg["content"] is None:
        msg["content"] = ""
    return msg


def _tool_result(block: dict[str, Any]) -> dict[str, Any]:
    text = text_of([p for b in _parts(block.get("content", "")) for p in _user_part(b)])
    if block.get("is_error"):
        text = "Error: " + text
    return {"role": "tool", "tool_call_id": block.get("tool_use_id", ""), "content": text}


def _user_part(block: dict[str, Any]) -> list[dict[str, Any]]:
    kind = block.get("type")
    if kind == "text":
        return [{"type": "text", "text": block.get("text", "")}]
    if kind == "image":
        source = block.get("source") or {}
        if source.get("type") == "base64":
            url = f"data:{source.get('media_type', 'image/png')};base64,{source.get('data', '')}"
        else:
            url = source.get("url", "")
        return [{"type": "image_url", "image_url": {"url": url}}]
    if kind == "document":
        return [{"type": "text", "text": f"[document: {block.get('title') or 'attached'}]"}]
    return []


def _compact(parts: list[dict[str, Any]]) -> str | list[dict[str, Any]]:
    """Text-only content as one string: the form compaction folds best."""
    if all(p["type"] == "text" for p in parts):
        return "\n\n".join(p["text"] for p in parts)
    return parts


# -- the compiled view back to a Messages request ----------------------------------------------


def from_view(view: list[dict[str, Any]], conversion: Conversion) -> dict[str, Any]:
    raw = conversion.raw
    head, rest = split_head(view, conversion)
    out = dict(raw)
    if head is not None and head != conversion.head:
        out["system"] = text_of(head.get("content"))
    out["messages"] = restore(rest, conversion.groups, _rebuild)
    return out


def _rebuild(msg: dict[str, Any]) -> list[dict[str, Any]]:
    role = msg.get("role")
    if role == "tool":
        block = {
            "type": "tool_result",
            "tool_use_id": msg.get("tool_call_id", ""),
            "content": text_of(msg.get("content")),
        }
        return [{"role": "user", "content": [block]}]
    if role == "assistant":
        return [{"role": "assistant", "content": answer_blocks(msg) or [_text("")]}]
    content = msg.get("content")
    if isinstance(content, list):
        return [{"role": "user", "content": [_block(p) for p in content]}]
    role = "user" if role in ("user", "system", "developer") else "assistant"
    return [{"role": role, "content": text_of(content)}]


def _text(text: str) -> dict[str, Any]:
    return {"type": "text", "text": text}


def _block(part: dict[str, Any]) -> dict[str, Any]:
    if part.get("type") != "image_url":
        return _text(part.get("text", ""))
    url = (part.get("image_url") or {}).get("url", "")
    if url.startswith("data:") and ";base64," in url:
        media, data = url[5:].split(";base64,", 1)
        return {"type": "image", "source": {"type": "base64", "media_type": media, "data": data}}
    return {"type": "image", "source": {"type": "url", "url": url}}


def answer_blocks(msg: dict[str, Any]) -> list[dict[str, Any]]:
    text = msg.get("content")
    thought = reasoning_of(msg)
    blocks = [thinking_block(thought)] if thought else []
    blocks += [_text(text)] if isinstance(text, str) and text else []
    for call in msg.get("tool_calls") or []:
        fn = call.get("function") or {}
        blocks.append(
            {
                "type": "tool_use",
                "id": call.get("id") or "toolu_" + uuid.uuid4().hex[:24],
                "name": fn.get("name", ""),
                "input": _arguments(fn.get("arguments")),
            }
        )
    return blocks


def _arguments(text: Any) -> Any:
    try:
        value = json.loads(text or "{}")
    except ValueError:
        return {"arguments": text}
    return value if isinstance(value, dict) else {"value": value}


# -- answers -------------------------------------------------------------------------------------


def from_completion(data: dict[str, Any], model: str, conversion: Any = None) -> dict[str, Any]:
    """A chat completion as a Messages answer."""
    choice = (data.get("choices") or [{}])[0]
    msg = choice.get("message") or {}
    return {
        "id": "msg_" + uuid.uuid4().hex[:24],
        "type": "message",
        "role": "assistant",
        "model": data.get("model") or model,
        "content": answer_blocks(msg),
        "stop_reason": STOP_REASONS.get(choice.get("finish_reason"), "end_turn"),
        "stop_sequence": None,
        "usage": usage_from_openai(data.get("usage")),
    }


def usage_from_openai(usage: Any) -> dict[str, int]:
    usage = usage if isinstance(usage, dict) else {}
    cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0
    return {
        "input_tokens": max(int(usage.get("prompt_tokens") or 0) - cached, 0),
        "output_tokens": int(usage.get("completion_tokens") or 0),
        "cache_read_input_tokens": cached,
        "cache_creation_input_tokens": 0,
    }


def usage_to_openai(usage: Any) -> dict[str, Any] | None:
    if not isinstance(usage, dict):
        return None
    cached = usage.get("cache_read_input_tokens") or 0
    prompt = (usage.get("input_tokens") or 0) + cached
    prompt += usage.get("cache_creation_input_tokens") or 0
    out = usage.get("output_tokens") or 0
    return {
        "prompt_tokens": prompt,
        "completion_tokens": out,
        "total_tokens": prompt + out,
        "prompt_tokens_details": {"cached_tokens": cached},
    }


def neutral_answer(data: dict[str, Any]) -> dict[str, Any]:
    """A native Messages answer as the neutral assistant message the audit records."""
    return _assistant(data.get("content"))


# -- errors --------------------------------------------------------------------------------------

_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    529: "overloaded_error",
}


def error_type(status: int) -> str:
    return _ERROR_TYPES.get(status, "api_error" if status >= 500 else "invalid_request_error")


def error_body(status: int, message: str) -> dict[str, Any]:
    return {"type": "error", "error": {"type": error_type(status), "message": message}}


def proxy_error_body(exc: ProxyError) -> dict[str, Any]:
    message = exc.message
    if isinstance(exc, ContextLengthExceeded):
        # Claude Code compacts on "prompt is too long": say it as Anthropic does, then why.
        message = f"prompt is too long: {exc.needed} tokens > {exc.budget} maximum. {message}"
    return error_body(exc.status, message)


def upstream_error_body(status: int, content: bytes) -> dict[str, Any]:
    """An upstream's error in Anthropic's envelope (an Anthropic one is kept as it came)."""
    try:
        data = json.loads(content)
    except ValueError:
        data = None
    if isinstance(data, dict) and data.get("type") == "error":
        return data
    err = data.get("error", data) if isinstance(data, dict) else None
    if isinstance(err, dict):
        message = str(err.get("message") or err)
    else:
        message = str(err) if err else content[:500].decode(errors="replace")
    return error_body(status, message)


def is_messages_path(path: str) -> bool:
    """Whether errors on this path are Anthropic's to render (its own envelope)."""
    return path.endswith(("/v1/messages", "/v1/messages/count_tokens"))
