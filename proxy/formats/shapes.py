"""Type checks of the fields the Messages and Responses converters read: a wrong type is a 400
naming its place (`messages.0.content.1.text`), never a TypeError deep in a conversion.

Only the fields ctxproxy itself reads are checked; every other field travels as it came, for
the upstream to judge."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from proxy.errors import BadRequest

STR, DICT, LIST, BOOL = (str,), (dict,), (list,), (bool,)
OPT_STR = (str, type(None))
TEXT_OR_LIST = (str, list)

# Per block type: the fields read and the types they may have.
ANTHROPIC_BLOCKS: dict[str, dict[str, tuple[type, ...]]] = {
    "text": {"text": STR},
    "image": {"source": DICT},
    "document": {"title": OPT_STR, "source": (dict, type(None))},
    "tool_use": {"id": STR, "name": STR, "input": DICT},
    "tool_result": {"tool_use_id": STR, "content": TEXT_OR_LIST, "is_error": (bool, type(None))},
}
IMAGE_SOURCE = {"type": STR, "media_type": STR, "data": STR, "url": STR}
ANTHROPIC_TOOL = {"name": STR, "description": OPT_STR, "input_schema": DICT, "type": OPT_STR}

RESPONSES_ITEMS: dict[str, dict[str, tuple[type, ...]]] = {
    "message": {"role": STR, "content": TEXT_OR_LIST},
    "function_call": {"call_id": STR, "name": STR, "arguments": STR},
    "custom_tool_call": {"call_id": STR, "name": STR, "input": STR},
    "function_call_output": {"call_id": STR, "output": TEXT_OR_LIST},
    "custom_tool_call_output": {"call_id": STR, "output": TEXT_OR_LIST},
}
RESPONSES_PARTS: dict[str, dict[str, tuple[type, ...]]] = {
    "input_text": {"text": STR},
    "output_text": {"text": STR},
    "text": {"text": STR},
    "refusal": {"refusal": STR},
    "input_image": {"image_url": OPT_STR, "file_id": OPT_STR},
    "input_file": {"filename": OPT_STR},
}
RESPONSES_TOOL = {
    "type": STR,
    "name": STR,
    "description": OPT_STR,
    "parameters": (dict, type(None)),
}


# A request's fields but its messages are checked in three steps, in this order:
# anthropic_fields, anthropic_fixed (the part an agent resends unchanged, checked once per
# distinct bytes: formats/seen.py's Fixed), anthropic_choice; anthropic_message checks each
# message. Responses': responses_fields, responses_tools, then responses_item for each item.


def anthropic_fields(raw: dict[str, Any]) -> None:
    """The model and the types of the top-level fields."""
    _model(raw)
    _fields(raw, {"system": (str, list, type(None)), "tools": (list, type(None))}, "")
    _fields(raw, {"tool_choice": (dict, type(None)), "metadata": (dict, type(None))}, "")


def anthropic_fixed(system: Any, tools: Any) -> None:
    """The system blocks and the tools (of the types anthropic_fields checked)."""
    if isinstance(system, list):
        _anthropic_blocks(system, "system")
    for i, tool in enumerate(tools or []):
        _fields(_object(tool, f"tools.{i}"), ANTHROPIC_TOOL, f"tools.{i}")


def anthropic_choice(raw: dict[str, Any]) -> None:
    """tool_choice's fields."""
    if isinstance(raw.get("tool_choice"), dict):
        _fields(raw["tool_choice"], {"type": STR, "name": STR}, "tool_choice")


def anthropic_message(msg: Any, i: int) -> None:
    """messages[i]: an object with a known role, its content a string or known blocks."""
    if not isinstance(msg, dict) or msg.get("role") not in ("user", "assistant", "system"):
        raise BadRequest(f"messages.{i}: role must be user, assistant or system", param="messages")
    if isinstance(msg.get("content"), list):
        _anthropic_blocks(msg["content"], f"messages.{i}.content")
    else:
        _fields(msg, {"content": STR}, f"messages.{i}")


def _anthropic_blocks(blocks: list[Any], where: str) -> None:
    for i, block in enumerate(blocks):
        at = f"{where}.{i}"
        kind = _object(block, at).get("type")
        _fields(block, {"type": STR}, at)
        _fields(block, ANTHROPIC_BLOCKS.get(str(kind), {}), at)
        if kind == "image" and isinstance(block.get("source"), dict):
            _fields(block["source"], IMAGE_SOURCE, f"{at}.source")
        if kind == "tool_result" and isinstance(block.get("content"), list):
            _anthropic_blocks(block["content"], f"{at}.content")


def responses_fields(raw: dict[str, Any]) -> None:
    """The model and the types of the top-level fields."""
    _model(raw)
    fields = {"instructions": OPT_STR, "tools": (list, type(None)), "text": (dict, type(None))}
    _fields(raw, fields | {"previous_response_id": OPT_STR, "input": TEXT_OR_LIST}, "")


def responses_tools(tools: Any) -> None:
    """Each function tool's fields (`tools` a list or None, as responses_fields checked)."""
    for i, tool in enumerate(tools or []):
        if _object(tool, f"tools.{i}").get("type") == "function":
            _fields(tool, RESPONSES_TOOL, f"tools.{i}")


def responses_item(item: Any, i: int) -> None:
    at = f"input.{i}"
    kind = _object(item, at).get("type", "message")
    _fields(item, {"type": STR}, at)
    _fields(item, RESPONSES_ITEMS.get(kind, {}), at)
    for key in ("content", "output"):
        if isinstance(item.get(key), list):
            _responses_parts(item[key], f"{at}.{key}")


def _responses_parts(parts: list[Any], where: str) -> None:
    for i, part in enumerate(parts):
        at = f"{where}.{i}"
        kind = _object(part, at).get("type")
        _fields(part, {"type": STR}, at)
        _fields(part, RESPONSES_PARTS.get(str(kind), {}), at)


def _model(raw: dict[str, Any]) -> None:
    if not isinstance(raw.get("model"), str) or not raw["model"]:
        raise BadRequest("model: a model name (a string) is required", param="model")


def _object(value: Any, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise BadRequest(f"{where}: expected an object", param=where)
    return value


def _fields(obj: dict[str, Any], types: Mapping[str, tuple[type, ...]], where: str) -> None:
    """Each field of `types` present in `obj` has one of its types (bool is no number here)."""
    for key, allowed in types.items():
        if key in obj and not isinstance(obj[key], allowed):
            at = f"{where}.{key}" if where else key
            names = " or ".join("null" if t is type(None) else _NAMES[t] for t in allowed)
            raise BadRequest(f"{at}: expected {names}", param=at)


_NAMES = {str: "a string", dict: "an object", list: "an array", bool: "a boolean"}
