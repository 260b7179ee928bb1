"""Messages as clients send them: hashing, references, accessors and iterations."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Sequence
from typing import Any

import orjson

# An OpenAI chat message as the client sent it; keys we do not know are kept untouched.
Message = dict[str, Any]

PROMPT_ROLES = frozenset({"system", "developer"})


_CANONICAL = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def canonical_json(msg: Any) -> str:
    """The one serialisation that content addressing (store, markers) relies on."""
    return _CANONICAL.encode(msg)


def message_hash(msg: Message) -> str:
    return hashlib.sha256(canonical_bytes(msg)).hexdigest()


def canonical_bytes(msg: Any) -> bytes:
    """canonical_json(msg) as UTF-8, made by orjson when that gives the same bytes: strings,
    64-bit integers, booleans and nulls, which it writes as the standard encoder does (floats
    it may write in another form, so they take the standard encoder)."""
    if orjson_exact(msg):
        try:
            return orjson.dumps(msg, option=orjson.OPT_SORT_KEYS)
        except orjson.JSONEncodeError:  # a lone surrogate
            pass
    # surrogatepass: JSON may carry a lone surrogate ("\ud800"), which strict UTF-8 rejects
    return canonical_json(msg).encode("utf-8", "surrogatepass")


_I64_MIN, _U64_MAX = -(2**63), 2**64 - 1
_ORJSON_DEPTH = 200


def orjson_exact(value: Any, depth: int = 0) -> bool:
    kind = type(value)
    if kind is str or kind is bool or value is None:
        return True
    if depth > _ORJSON_DEPTH:  # orjson refuses deeper nesting; the standard encoder decides
        return False
    if kind is dict:
        return all(type(k) is str and orjson_exact(v, depth + 1) for k, v in value.items())
    if kind is list:
        return all(orjson_exact(v, depth + 1) for v in value)
    if kind is int:
        return _I64_MIN <= value <= _U64_MAX
    return False


def content_key(msg: Message) -> str:
    """A digest equal for equal messages, for caches inside one process.

    Where orjson writes the message exactly (nearly always), its sorted-keys JSON hashed;
    otherwise string values are hashed as raw UTF-8 instead of being JSON-escaped first.
    Values are tagged and length-prefixed, so two different messages collide only if sha256
    does; the two forms never meet (a "j" prefix on the first).
    """
    if type(msg) is dict and orjson_exact(msg):
        try:
            return "j" + hashlib.sha256(orjson.dumps(msg, option=orjson.OPT_SORT_KEYS)).hexdigest()
        except orjson.JSONEncodeError:
            pass
    digest = hashlib.sha256()
    for key in sorted(msg):
        value = msg[key]
        tag = b"s" if isinstance(value, str) else b"j"
        text = value if isinstance(value, str) else canonical_json(value)
        data = text.encode("utf-8", "surrogatepass")
        name = key.encode("utf-8", "surrogatepass")
        digest.update(b"%d:%d:%s:" % (len(name), len(data), tag))
        digest.update(name)
        digest.update(data)
    return digest.hexdigest()


def original_ref(msg: Message) -> str:
    """How a marker names the raw message, so a reader can fetch it from the store."""
    return f"/messages/{message_hash(msg)[:16]}"


def recall_ref(msg: Message) -> str:
    """What a placeholder ends with: the original's ref, and the tool that gets it back."""
    return f"ctxproxy_recall original: {original_ref(msg)}"


def text_of(msg: Message) -> str | None:
    """The message's text: a string, the joined text parts of a list, or None if not all text."""
    content = msg.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list) and all(_is_text_part(p) for p in content):
        return "\n".join(p["text"] for p in content)
    return None


def _is_text_part(part: Any) -> bool:
    return (
        isinstance(part, dict) and part.get("type") == "text" and isinstance(part.get("text"), str)
    )


def content_size(msg: Message) -> int:
    """Characters a strategy can remove: text content plus tool-call arguments."""
    text = text_of(msg) or ""
    args = sum(len(c.get("function", {}).get("arguments") or "") for c in tool_calls(msg))
    return len(text) + args


def tool_calls(msg: Message) -> list[dict[str, Any]]:
    calls = msg.get("tool_calls") if msg.get("role") == "assistant" else None
    return [c for c in calls if isinstance(c, dict)] if isinstance(calls, list) else []


def with_content(msg: Message, content: str) -> Message:
    """A copy with new content; every other key (tool_call_id, name, unknown keys) kept."""
    return {**msg, "content": content}


def tool_names(messages: Iterable[Message]) -> dict[str, str]:
    """tool_call_id -> function name, from the assistant calls in the history."""
    names: dict[str, str] = {}
    for msg in messages:
        for call in tool_calls(msg):
            fn = call.get("function")
            if isinstance(call.get("id"), str) and isinstance(fn, dict):
                names[call["id"]] = str(fn.get("name", "?"))
    return names


def iterations(messages: Sequence[Message]) -> list[int]:
    """Iteration number per message.

    An iteration is a user message, or an assistant message with the tool results that answer
    it. Prompt messages before the first iteration get -1; later ones join the current one.
    """
    current, out = -1, []
    for msg in messages:
        if msg.get("role") in ("user", "assistant"):
            current += 1
        out.append(current)
    return out


def protected_indexes(
    messages: Sequence[Message], iters: Sequence[int], *, latest_user: bool = True
) -> set[int]:
    """Messages no strategy may change: prompts, the first user message (the task), the final
    turn, and (unless `latest_user` is False) the latest user message."""
    keep = {i for i, m in enumerate(messages) if m.get("role") in PROMPT_ROLES}
    users = [i for i, m in enumerate(messages) if m.get("role") == "user"]
    keep.update(users[:1] + (users[-1:] if latest_user else []))
    if iters:
        last = iters[-1]
        keep.update(i for i, it in enumerate(iters) if it == last)
    return keep


def old_indexes(
    messages: Sequence[Message], keep_recent: int, roles: Iterable[str] = ("tool", "assistant")
) -> list[int]:
    """Indexes a strategy may compact, oldest first: outside the keep window and unprotected.
    A latest user message the agent has moved on from (outside the keep window) may fold."""
    iters = iterations(messages)
    protected = protected_indexes(messages, iters, latest_user=False)
    cutoff = (iters[-1] if iters else 0) - keep_recent
    wanted = frozenset(roles)
    return [
        i
        for i, it in enumerate(iters)
        if it <= cutoff and i not in protected and messages[i].get("role") in wanted
    ]
