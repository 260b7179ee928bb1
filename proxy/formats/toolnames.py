"""Responses tools that chat has no form for: namespaces, custom (freeform) tools, server tools.

A namespace's functions (Codex's `multi_agent_v1`) become chat functions named
`<namespace>__<name>`; a custom tool becomes a function taking one string, `input`; a server-side
tool (web search, file search…) has nothing on a local model to run it and is removed, with a
note. `Names` maps a chat call back to the client's own form: name, namespace, item type."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from proxy.formats.tools import NAMESPACE_SEP as SEP
from proxy.formats.tools import SERVER_TOOL, responses_to_openai

REMOVED_KEY = "ctxproxy_tools_removed"  # in the stored request: what translation left out


@dataclass(frozen=True)
class Origin:
    name: str
    namespace: str | None = None
    custom: bool = False


@dataclass
class Names:
    """Chat function name -> the client's tool, for the tools that were renamed or reshaped."""

    origins: dict[str, Origin] = field(default_factory=dict)

    def flat(self, name: str, namespace: str | None) -> str:
        return f"{namespace}{SEP}{name}" if namespace else name

    def origin(self, chat_name: str) -> Origin:
        return self.origins.get(chat_name) or Origin(chat_name)


def names_of(tools: Any) -> Names:
    names = Names()
    for tool in tools if isinstance(tools, list) else []:
        if not isinstance(tool, dict):
            continue
        if tool.get("type") == "custom":
            names.origins[str(tool.get("name", ""))] = Origin(str(tool.get("name", "")), None, True)
        elif tool.get("type") == "namespace":
            ns = str(tool.get("name", ""))
            for inner in _functions(tool.get("tools")):
                name = str(inner.get("name", ""))
                names.origins[names.flat(name, ns)] = Origin(name, ns)
    return names


def _functions(tools: Any) -> list[dict[str, Any]]:
    ok = isinstance(tools, list)
    return [t for t in tools if isinstance(t, dict) and t.get("type") == "function"] if ok else []


def chat_tools(tools: Any) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The client's Responses tools as chat function tools, and the notes of those removed."""
    out: list[dict[str, Any]] = []
    removed: list[dict[str, Any]] = []
    for tool in tools if isinstance(tools, list) else []:
        kind = tool.get("type") if isinstance(tool, dict) else None
        if kind == "function":
            out.append(responses_to_openai(tool))
        elif kind == "namespace":
            out.extend(_namespaced(tool))
        elif kind == "custom":
            out.append(_custom(tool))
        elif isinstance(kind, str):
            removed.append({"type": kind, "name": tool.get("name"), "reason": SERVER_TOOL})
    return out, removed


def _namespaced(tool: dict[str, Any]) -> list[dict[str, Any]]:
    ns = str(tool.get("name", ""))
    out = []
    for inner in _functions(tool.get("tools")):
        fn = responses_to_openai(inner)
        fn["function"]["name"] = f"{ns}{SEP}{inner.get('name', '')}"
        out.append(fn)
    return out


def _custom(tool: dict[str, Any]) -> dict[str, Any]:
    """A freeform tool as a function of one string; its grammar, if any, told in the text."""
    description = str(tool.get("description") or "")
    fmt = tool.get("format")
    if not isinstance(fmt, dict):
        fmt = {}
    if fmt.get("type") == "grammar" and fmt.get("definition"):
        syntax = fmt.get("syntax", "grammar")
        description += f"\n\nThe input follows this {syntax} grammar:\n{fmt['definition']}"
    text = {"type": "string", "description": "The tool's input, as free text"}
    schema = {"type": "object", "properties": {"input": text}, "required": ["input"]}
    function = {"name": tool.get("name", ""), "description": description, "parameters": schema}
    return {"type": "function", "function": function}


def call_to_chat(item: dict[str, Any]) -> dict[str, Any]:
    """A function_call or custom_tool_call input item as a chat tool call."""
    name = Names().flat(str(item.get("name", "")), item.get("namespace"))
    if item.get("type") == "custom_tool_call":
        arguments = json.dumps({"input": item.get("input", "")})
    else:
        arguments = item.get("arguments", "")
    fn = {"name": name, "arguments": arguments}
    return {"id": item.get("call_id", ""), "type": "function", "function": fn}


def call_item(call: dict[str, Any], names: Names, item_id: str) -> dict[str, Any]:
    """A chat tool call as the client's own output item: function_call (with its namespace)
    or custom_tool_call."""
    fn = call.get("function") or {}
    origin = names.origin(str(fn.get("name", "")))
    base = {"id": item_id, "call_id": call.get("id", ""), "name": origin.name}
    if origin.custom:
        return {"type": "custom_tool_call", **base, "input": custom_input(fn.get("arguments"))}
    item = {"type": "function_call", **base, "arguments": fn.get("arguments", "")}
    if origin.namespace:
        item["namespace"] = origin.namespace
    return {**item, "status": "completed"}


def custom_input(arguments: Any) -> str:
    """The free text a model wrote for a custom tool: its `input`, or what it wrote."""
    try:
        value = json.loads(arguments or "{}")
    except ValueError:
        return str(arguments or "")
    if isinstance(value, dict) and isinstance(value.get("input"), str):
        return value["input"]
    return str(arguments or "")
