"""OpenAI Responses <-> the neutral form: requests, answers and errors.

`function_call` items become an assistant message's tool calls (consecutive ones one message)
and `function_call_output` a `tool` message. `reasoning` and items with no neutral form travel
in the client's raw items, sent as they came while compaction leaves their neighbours alone."""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

from proxy.errors import BadRequest
from proxy.formats import shapes, toolnames, tools
from proxy.formats.groups import Conversion, Group, restore, split_head, text_of
from proxy.formats.reasoning import reasoning_item, reasoning_of
from proxy.formats.seen import Fixed, Seen

API = "responses"
_PASSED = ("model", "temperature", "top_p", "stream", "parallel_tool_calls", "user")
_TEXT_PARTS = ("input_text", "output_text", "text", "refusal")
_CALLS = ("function_call", "custom_tool_call")
_OUTPUTS = ("function_call_output", "custom_tool_call_output")
SEEN = Seen("seen.responses")  # items already converted: a session resends them every turn
# The instructions and tools, the tools checked and converted once: (chat tools, notes of those
# left out), shared by the requests that send them (never changed).
FIXED: Fixed[tuple[list[dict[str, Any]], list[dict[str, Any]]]] = Fixed("seen.responses.fixed")


def to_neutral(raw: dict[str, Any]) -> Conversion:
    shapes.responses_fields(raw)
    fixed = (raw.get("instructions"), raw.get("tools"))
    (converted, removed), unseen = FIXED.convert(fixed, _fixed)
    items = raw.get("input")
    if isinstance(items, str):
        items = [{"role": "user", "content": items}]
    if not isinstance(items, list) or not items:
        raise BadRequest("input: a string or at least one item is required", param="input")
    body: dict[str, Any] = {k: raw[k] for k in _PASSED if k in raw}
    if isinstance(raw.get("max_output_tokens"), int):
        body["max_tokens"] = raw["max_output_tokens"]
    head = None
    if isinstance(raw.get("instructions"), str) and raw["instructions"]:
        head = {"role": "system", "content": raw["instructions"]}
    groups, new = _groups(items)
    body["messages"] = ([head] if head else []) + [m for g in groups for m in g.neutral]
    if converted:
        body["tools"] = list(converted)  # its own list: the definitions are FIXED's
        if (choice := tools.responses_tool_choice(raw.get("tool_choice"))) is not None:
            body["tool_choice"] = choice
    if removed:
        body[toolnames.REMOVED_KEY] = list(removed)
    if raw.get("stream"):
        body["stream_options"] = {"include_usage": True}
    if (response_format := _format(raw.get("text"))) is not None:
        body["response_format"] = response_format
    if isinstance(raw.get("prompt_cache_key"), str) and "user" not in body:
        body["user"] = raw["prompt_cache_key"]  # Codex's is its conversation id: the session
    return Conversion(body, raw, groups, head, unseen=unseen + new)


def _fixed(parts: tuple[Any, Any]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    client_tools = parts[1]  # the instructions need no conversion: they count as seen or not
    shapes.responses_tools(client_tools)
    return toolnames.chat_tools(client_tools)


def _format(text: Any) -> dict[str, Any] | None:
    """Responses' text.format as chat's response_format (structured output)."""
    fmt = text.get("format") if isinstance(text, dict) else None
    if not isinstance(fmt, dict) or fmt.get("type") not in ("json_schema", "json_object"):
        return None
    if fmt["type"] == "json_object":
        return {"type": "json_object"}
    schema = {k: fmt[k] for k in ("name", "schema", "strict", "description") if k in fmt}
    return {"type": "json_schema", "json_schema": schema}


def _groups(items: list[Any]) -> tuple[list[Group], int]:
    """The items' groups, and the bytes of those no earlier request sent."""
    groups: list[Group] = []
    pending: list[Any] = []  # items with no neutral form: they go with the next message
    joinable = False  # whether a function_call joins the last group's assistant message
    all_converted, unseen = SEEN.convert_all(items, _checked_item)
    for item, converted in zip(items, all_converted, strict=True):
        if item.get("type", "message") in _CALLS and joinable and not pending:
            last = groups[-1].neutral[-1]  # a new list: the one it holds may be SEEN's
            last["tool_calls"] = [*last.get("tool_calls", []), *converted[0]["tool_calls"]]
            groups[-1].raw.append(item)
            continue
        if not converted:
            pending.append(item)
            continue
        message = converted[0]
        groups.append(Group([*pending, item], [message]))
        pending = []
        joinable = message["role"] == "assistant"
    if pending:
        if not groups:
            raise BadRequest("input: no message or tool call in it", param="input")
        groups[-1].raw.extend(pending)
    return groups, unseen


def _checked_item(item: Any, i: int) -> list[dict[str, Any]]:
    """The item's neutral message ([] for an item without one), its fields checked."""
    if not isinstance(item, dict):
        raise BadRequest(f"input.{i}: an item must be an object", param="input")
    shapes.responses_item(item, i)
    message = _message(item, item.get("type", "message"))
    return [] if message is None else [message]


def _message(item: dict[str, Any], kind: str) -> dict[str, Any] | None:
    if kind in _CALLS:
        return {"role": "assistant", "content": None, "tool_calls": [_call(item)]}
    if kind in _OUTPUTS:
        output = item.get("output", "")
        text = output if isinstance(output, str) else text_of(_parts(output))
        return {"role": "tool", "tool_call_id": item.get("call_id", ""), "content": text}
    if kind != "message":
        return None
    role = item.get("role")
    role = "system" if role in ("system", "developer") else role
    if role not in ("user", "assistant", "system"):
        raise BadRequest(f"input: unknown message role {role!r}", param="input")
    content = item.get("content")
    if not isinstance(content, str):
        parts = _parts(content)
        text_only = all(p["type"] == "text" for p in parts)
        content = "".join(p["text"] for p in parts) if text_only else parts
    return {"role": role, "content": content}


def _call(item: dict[str, Any]) -> dict[str, Any]:
    return toolnames.call_to_chat(item)


def _parts(content: Any) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for part in content if isinstance(content, list) else []:
        kind = part.get("type") if isinstance(part, dict) else None
        if kind in _TEXT_PARTS:
            out.append({"type": "text", "text": part.get("text") or part.get("refusal") or ""})
        elif kind == "input_image":
            url = part.get("image_url") or part.get("file_id") or ""
            out.append({"type": "image_url", "image_url": {"url": url}})
        elif kind == "input_file":
            out.append({"type": "text", "text": f"[file: {part.get('filename') or 'attached'}]"})
    return out


# -- the compiled view back to a Responses request ---------------------------------------------


def from_view(view: list[dict[str, Any]], conversion: Conversion) -> dict[str, Any]:
    head, rest = split_head(view, conversion)
    out = dict(conversion.raw)
    if head is not None and head != conversion.head:
        out["instructions"] = text_of(head.get("content"))
    names = toolnames.names_of(conversion.raw.get("tools"))
    custom = {
        i.get("call_id")
        for g in conversion.groups
        for i in g.raw
        if isinstance(i, dict) and i.get("type") == "custom_tool_call"
    }
    out["input"] = restore(rest, conversion.groups, lambda m: _rebuild(m, names, custom))
    return out


def _rebuild(msg: dict[str, Any], names: toolnames.Names, custom: set) -> list[dict[str, Any]]:
    role = msg.get("role")
    if role == "tool":
        call_id = msg.get("tool_call_id", "")
        kind = "custom_tool_call_output" if call_id in custom else "function_call_output"
        return [{"type": kind, "call_id": call_id, "output": text_of(msg.get("content"))}]
    if role == "assistant":
        return output_items(msg, names)
    content = msg.get("content")
    if isinstance(content, list):
        content = [_part(p) for p in content]
    role = "developer" if role in ("system", "developer") else "user"
    return [{"type": "message", "role": role, "content": content}]


def _part(part: dict[str, Any]) -> dict[str, Any]:
    if part.get("type") == "image_url":
        return {"type": "input_image", "image_url": (part.get("image_url") or {}).get("url", "")}
    return {"type": "input_text", "text": part.get("text", "")}


def output_items(msg: dict[str, Any], names: toolnames.Names | None = None) -> list[dict[str, Any]]:
    """An assistant message as Responses output items: a message, then its tool calls in the
    client's own form (a namespaced function_call, a custom_tool_call)."""
    thought = reasoning_of(msg)
    items: list[dict[str, Any]] = [reasoning_item(thought)] if thought else []
    if isinstance(msg.get("content"), str) and msg["content"]:
        text = {"type": "output_text", "text": msg["content"], "annotations": []}
        items.append(
            {
                "type": "message",
                "id": "msg_" + uuid.uuid4().hex[:24],
                "status": "completed",
                "role": "assistant",
                "content": [text],
            }
        )
    for call in msg.get("tool_calls") or []:
        item_id = "fc_" + uuid.uuid4().hex[:24]
        items.append(toolnames.call_item(call, names or toolnames.Names(), item_id))
    return items


# -- answers -------------------------------------------------------------------------------------


def skeleton(conversion: Conversion, model: str, status: str) -> dict[str, Any]:
    raw = conversion.raw
    return {
        "id": conversion.answer_id or "resp_" + uuid.uuid4().hex,
        "object": "response",
        "created_at": int(time.time()),
        "status": status,
        "model": model,
        "output": [],
        "error": None,
        "incomplete_details": None,
        "instructions": raw.get("instructions"),
        "max_output_tokens": raw.get("max_output_tokens"),
        "parallel_tool_calls": raw.get("parallel_tool_calls", True),
        "previous_response_id": raw.get("previous_response_id"),
        "store": raw.get("store", True),
        "temperature": raw.get("temperature"),
        "text": raw.get("text", {"format": {"type": "text"}}),
        "tool_choice": raw.get("tool_choice", "auto"),
        "tools": raw.get("tools", []),
        "top_p": raw.get("top_p"),
        "metadata": raw.get("metadata") or {},
        "usage": None,
    }


def finished(
    response: dict[str, Any], finish: str | None, usage: Any, output: list[dict[str, Any]]
) -> dict[str, Any]:
    response = {**response, "output": output, "usage": usage_from_openai(usage)}
    if finish == "length":
        response["status"] = "incomplete"
        response["incomplete_details"] = {"reason": "max_output_tokens"}
    else:
        response["status"] = "completed"
    return response


def from_completion(data: dict[str, Any], model: str, conversion: Conversion) -> dict[str, Any]:
    choice = (data.get("choices") or [{}])[0]
    msg = choice.get("message") or {}
    base = skeleton(conversion, data.get("model") or model, "completed")
    output = output_items(msg, toolnames.names_of(conversion.raw.get("tools")))
    return finished(base, choice.get("finish_reason"), data.get("usage"), output)


def usage_from_openai(usage: Any) -> dict[str, Any]:
    usage = usage if isinstance(usage, dict) else {}
    prompt, out = int(usage.get("prompt_tokens") or 0), int(usage.get("completion_tokens") or 0)
    cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0
    return {
        "input_tokens": prompt,
        "input_tokens_details": {"cached_tokens": cached},
        "output_tokens": out,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": prompt + out,
    }


def usage_to_openai(usage: Any) -> dict[str, Any] | None:
    if not isinstance(usage, dict):
        return None
    prompt, out = usage.get("input_tokens") or 0, usage.get("output_tokens") or 0
    cached = (usage.get("input_tokens_details") or {}).get("cached_tokens") or 0
    return {
        "prompt_tokens": prompt,
        "completion_tokens": out,
        "total_tokens": prompt + out,
        "prompt_tokens_details": {"cached_tokens": cached},
    }


def neutral_answer(data: dict[str, Any]) -> dict[str, Any]:
    """A Responses answer's output as the neutral assistant message the audit records."""
    items = [i for i in data.get("output") or [] if isinstance(i, dict)]
    messages = [m for g in _groups(items)[0] for m in g.neutral if m["role"] == "assistant"]
    if not messages:
        return {"role": "assistant", "content": ""}
    merged = dict(messages[0])
    for extra in messages[1:]:
        merged["content"] = (merged.get("content") or "") + (extra.get("content") or "") or None
        if extra.get("tool_calls"):
            merged["tool_calls"] = [*merged.get("tool_calls", []), *extra["tool_calls"]]
    return merged


def upstream_error_body(status: int, content: bytes) -> dict[str, Any]:
    try:
        data = json.loads(content)
    except ValueError:
        data = None
    if isinstance(data, dict) and isinstance(data.get("error"), dict):
        return data
    message = content[:500].decode(errors="replace") or f"upstream answered HTTP {status}"
    return {"error": {"message": message, "type": "upstream_error", "param": None, "code": status}}
