"""OpenAI chat wire models: validate what a client sent, keep every field we do not know."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Literal

import orjson
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from proxy import sizes
from proxy.errors import BadRequest
from proxy.formats.digits import long_number
from strategies.prefix import PrefixMemo


class _Open(BaseModel):
    model_config = ConfigDict(extra="allow")


class FunctionCall(_Open):
    name: str
    arguments: str


class ToolCall(_Open):
    id: str
    type: str = "function"
    function: FunctionCall


class ChatMessage(_Open):
    role: Literal["system", "developer", "user", "assistant", "tool", "function"]
    content: str | list[dict[str, Any]] | None = None
    name: str | None = None
    tool_calls: list[ToolCall] | None = None
    tool_call_id: str | None = None

    @field_validator("content")
    @classmethod
    def _parts_have_type(cls, v: Any) -> Any:
        if isinstance(v, list) and not all(isinstance(p.get("type"), str) for p in v):
            raise ValueError("every content part needs a string 'type'")
        return v


class StreamOptions(_Open):
    include_usage: bool | None = None


# A model name is stored, logged and used as a cache key: bounded, and printable, so that every
# database takes the same names (PostgreSQL refuses NUL; its column holds 255 characters).
MAX_MODEL_CHARS = 255
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


class ChatRequest(_Open):
    model: str = Field(min_length=1)
    messages: list[ChatMessage] = Field(min_length=1)
    stream: bool | None = False
    stream_options: StreamOptions | None = None
    tools: list[dict[str, Any]] | None = None
    max_tokens: int | None = Field(None, ge=0)
    max_completion_tokens: int | None = Field(None, ge=0)
    user: str | None = None
    metadata: dict[str, Any] | None = None

    @field_validator("model")
    @classmethod
    def _model_name(cls, v: str) -> str:
        if len(v) > MAX_MODEL_CHARS:
            raise ValueError(f"a model name is at most {MAX_MODEL_CHARS} characters")
        if _CONTROL.search(v):
            raise ValueError("a model name has no control characters (NUL, newline, …)")
        return v


def chat_openapi() -> dict[str, Any]:
    """The request body for OpenAPI: the route reads raw bytes (for the size limit), so FastAPI
    cannot derive it. References are inlined, since a route's schema has no $defs of its own."""
    schema = ChatRequest.model_json_schema()
    defs = schema.pop("$defs", {})

    def inline(node: Any) -> Any:
        if isinstance(node, dict):
            ref = node.get("$ref", "")
            if ref.startswith("#/$defs/"):
                return inline(defs[ref.removeprefix("#/$defs/")])
            return {k: inline(v) for k, v in node.items()}
        return [inline(v) for v in node] if isinstance(node, list) else node

    body = {"required": True, "content": {"application/json": {"schema": inline(schema)}}}
    return {"requestBody": body}


# How deep a body's JSON may nest (the body itself is level 1). Every later step that walks a
# body (hashing, encoding, storing, converting) recurses, some with several frames a level;
# this keeps them all far from Python's recursion limit. No API's request needs a tenth of it.
MAX_DEPTH = 128


def parse_json(raw: bytes) -> dict[str, Any]:
    """The body as a dict, no deeper than MAX_DEPTH. orjson first (several times faster);
    whatever it refuses or might read differently (an integer past 64 bits it would make a
    float) takes the standard parser, whose checks and messages decide."""
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return _parse_json_std(raw)
    if long_number(raw):  # a run of 19 digits may be an integer past 64 bits
        return _parse_json_std(raw)
    return _checked(data)


def _checked(data: Any) -> dict[str, Any]:
    """`data` if it is an object no deeper than MAX_DEPTH: checked before anything walks it,
    by a walk a level at a time, with no recursion of its own."""
    if not isinstance(data, dict):
        raise BadRequest("The request body must be a JSON object")
    level: list[Any] = [data]
    for _ in range(MAX_DEPTH):
        level = [
            v
            for node in level
            for v in (node.values() if isinstance(node, dict) else node)
            if isinstance(v, (dict, list))
        ]
        if not level:
            return data
    raise _too_deep()


def _too_deep() -> BadRequest:
    return BadRequest(
        f"Invalid JSON body: nested deeper than {MAX_DEPTH} levels", code="json_too_deep"
    )


def _parse_json_std(raw: bytes) -> dict[str, Any]:
    try:
        data = json.loads(raw, parse_constant=_not_json, parse_float=_finite)
    except RecursionError:
        raise _too_deep() from None
    except (UnicodeDecodeError, ValueError) as exc:
        raise BadRequest(f"Invalid JSON body: {exc}") from None
    data = _checked(data)
    if b"\\ud" in raw.lower() and not _is_valid_unicode(data):
        raise BadRequest("Invalid JSON body: a string holds an unpaired UTF-16 surrogate")
    return data


def _not_json(name: str) -> Any:
    # Python's json takes NaN and Infinity, which JSON has not and the forwarding encoder refuses.
    raise ValueError(f"{name} is not a JSON value")


def _finite(text: str) -> float:
    value = float(text)
    if value in (float("inf"), float("-inf")):
        raise ValueError(f"number {text[:40]} is out of range")
    return value


def _is_valid_unicode(data: Any) -> bool:
    try:
        json.dumps(data, ensure_ascii=False).encode()
    except UnicodeEncodeError:
        return False
    return True


@dataclass(frozen=True)
class ChatHead:
    """What the exchange needs of a validated chat request."""

    model: str
    stream: bool | None


_ROLES = frozenset(ChatMessage.model_fields["role"].annotation.__args__)  # type: ignore[union-attr]
_OPTIONAL_STR = ("name", "tool_call_id")


def chat_head(data: dict[str, Any]) -> ChatHead:
    """Validate a chat request as parse_chat does, without building a model per message: a
    plain check accepts what is plainly valid; anything else goes to parse_chat, which
    refuses it with its message or accepts it as pydantic would (coercions included)."""
    if _plainly_valid(data):
        return ChatHead(data["model"], data.get("stream"))
    chat = parse_chat(data)
    return ChatHead(chat.model, chat.stream)


def _plainly_valid(data: dict[str, Any]) -> bool:
    model, messages = data.get("model"), data.get("messages")
    if type(model) is not str or not 0 < len(model) <= MAX_MODEL_CHARS or _CONTROL.search(model):
        return False
    if type(messages) is not list or not messages:
        return False
    for key, kind in _TOP_LEVEL.items():
        value = data.get(key)
        if value is not None and type(value) is not kind:
            return False
    for key in ("max_tokens", "max_completion_tokens"):
        if data.get(key) is not None and data[key] < 0:
            return False
    options = data.get("stream_options")
    if options is not None and type(options.get("include_usage", False)) not in (bool, NoneType):
        return False
    tools = data.get("tools")
    if tools is not None and not all(type(t) is dict for t in tools):
        return False
    return _plain_messages(messages)


# After each message of a history seen before: whether it and all before it are plainly valid
# (False: not known to be). A resent history checks only the messages after the longest such
# prefix.
_PLAIN: PrefixMemo[bool] = PrefixMemo("chat.plain", value_bytes=8)


def _plain_messages(messages: list[Any]) -> bool:
    if len(messages) < sizes.MEMO_FROM_MESSAGES:
        return all(map(_plain_message, messages))

    def check(known: list[bool]) -> list[bool]:
        tail = messages[len(known) :]
        return [(not known or known[-1]) and all(map(_plain_message, tail))] * len(tail)

    return _PLAIN.values(messages, check)[-1]


NoneType = type(None)
_TOP_LEVEL = {
    "stream": bool,
    "stream_options": dict,
    "tools": list,
    "max_tokens": int,
    "max_completion_tokens": int,
    "user": str,
    "metadata": dict,
}


def _plain_message(m: Any) -> bool:
    if type(m) is not dict or type(m.get("role")) is not str or m["role"] not in _ROLES:
        return False
    content = m.get("content")
    if content is not None and type(content) is not str:
        if type(content) is not list:
            return False
        for part in content:
            if type(part) is not dict or type(part.get("type")) is not str:
                return False
    for key in _OPTIONAL_STR:
        value = m.get(key)
        if value is not None and type(value) is not str:
            return False
    calls = m.get("tool_calls")
    if calls is not None:
        if type(calls) is not list:
            return False
        for call in calls:
            if type(call) is not dict or type(call.get("id")) is not str:
                return False
            if type(call.get("type", "function")) is not str:
                return False
            fn = call.get("function")
            if type(fn) is not dict:
                return False
            if type(fn.get("name")) is not str or type(fn.get("arguments")) is not str:
                return False
    return True


def parse_chat(data: dict[str, Any]) -> ChatRequest:
    try:
        return ChatRequest.model_validate(data)
    except ValidationError as exc:
        located = [(_in_data(data, err["loc"]), err) for err in exc.errors()]
        path, err = max(located, key=lambda pe: len(pe[0]))  # the most specific; first on ties
        where = ".".join(str(p) for p in path)
        raise BadRequest(f"Invalid request: {where}: {err['msg']}", param=where) from None


def _in_data(data: Any, loc: tuple[Any, ...]) -> list[Any]:
    """The error's location as keys into the request: without pydantic's union member tags
    ("str", "list[dict[str,any]]"), but keeping a missing field's name at the end."""
    path, node = [], data
    for i, part in enumerate(loc):
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node):
            node = node[part]
        elif not (isinstance(node, dict) and i == len(loc) - 1):
            continue
        path.append(part)
    return path
