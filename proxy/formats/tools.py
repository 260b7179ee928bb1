"""Tool definitions and tool_choice in each API's own format, as OpenAI chat's (the recall tool
is offered only on translated exchanges, so nothing goes the other way)."""

from __future__ import annotations

from typing import Any

EMPTY_SCHEMA: dict[str, Any] = {"type": "object", "properties": {}}
NAMESPACE_SEP = "__"  # a namespaced Responses function's chat name: <namespace>__<name>
SERVER_TOOL = "server-side tool: left out when translated to chat (no local model runs it)"


def anthropic_to_openai(tool: dict[str, Any]) -> dict[str, Any]:
    function = {"name": tool.get("name", ""), "parameters": tool.get("input_schema", EMPTY_SCHEMA)}
    if tool.get("description"):
        function["description"] = tool["description"]
    return {"type": "function", "function": function}


def responses_to_openai(tool: dict[str, Any]) -> dict[str, Any]:
    function = {k: tool[k] for k in ("name", "description", "parameters", "strict") if k in tool}
    function.setdefault("parameters", EMPTY_SCHEMA)
    return {"type": "function", "function": function}


def anthropic_tools(tools: Any) -> list[dict[str, Any]] | None:
    """Client tools as OpenAI function tools; server tools (web search, …) have no equivalent
    on a local model and are left out of the translation."""
    if not isinstance(tools, list):
        return None
    out = [anthropic_to_openai(t) for t in tools if isinstance(t, dict) and is_client_tool(t)]
    return out or None


def anthropic_server_tools(tools: Any) -> list[dict[str, Any]]:
    """Notes of the server tools (web_search_20250305, code_execution…) translation leaves out."""
    if not isinstance(tools, list):
        return []
    return [
        {"type": t.get("type"), "name": t.get("name"), "reason": SERVER_TOOL}
        for t in tools
        if isinstance(t, dict) and not is_client_tool(t)
    ]


def is_client_tool(tool: dict[str, Any]) -> bool:
    return tool.get("type") in (None, "custom") and "name" in tool


def responses_tools(tools: Any) -> list[dict[str, Any]] | None:
    if not isinstance(tools, list):
        return None
    out = [
        responses_to_openai(t) for t in tools if isinstance(t, dict) and t.get("type") == "function"
    ]
    return out or None


def anthropic_tool_choice(choice: Any) -> tuple[Any, bool | None]:
    """OpenAI's tool_choice and parallel_tool_calls for Anthropic's tool_choice."""
    if not isinstance(choice, dict):
        return None, None
    parallel = False if choice.get("disable_parallel_tool_use") else None
    kind = choice.get("type")
    if kind == "tool":
        return {"type": "function", "function": {"name": choice.get("name", "")}}, parallel
    return {"auto": "auto", "any": "required", "none": "none"}.get(str(kind)), parallel


def responses_tool_choice(choice: Any) -> Any:
    """A forced function, namespaced function or custom tool is the chat function it became
    (proxy/formats/toolnames.py names them)."""
    if isinstance(choice, dict) and choice.get("type") in ("function", "custom"):
        name, namespace = choice.get("name", ""), choice.get("namespace")
        name = f"{namespace}{NAMESPACE_SEP}{name}" if namespace else name
        return {"type": "function", "function": {"name": name}}
    return choice if isinstance(choice, str) else None
