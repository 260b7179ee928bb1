"""Codex's rollouts (~/.codex/sessions/YYYY/MM/DD/rollout-*.jsonl) as sessions.

Each line is `{"timestamp", "type", "payload"}`. `response_item` payloads are the Responses
API items Codex sends back as its input every turn: messages (developer, user, assistant),
reasoning, function and custom tool calls and their outputs. A request for an answer was made
before each run of the model's own items (reasoning, assistant messages, calls): its input is
every item before that run. `session_meta` may carry the base instructions; the tool
definitions are not written."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from proxy.formats import responses
from proxy.replay.lines import objects
from proxy.replay.session import Session, Turn

KIND = "codex"
# What the model wrote: a run of these is one answer.
OUTPUTS = ("reasoning", "function_call", "custom_tool_call", "local_shell_call", "web_search_call")
BOOKKEEPING = (
    "session_meta",
    "event_msg",
    "turn_context",
    "compacted",
    "token_usage_record",
    "world_state",
)
LACKS_TOOLS = "the tool definitions (Codex does not write them)"
LACKS_INSTRUCTIONS = "the base instructions (this rollout does not hold them)"
# Seen with 0.171: the instructions sent were a shorter variant of those the rollout keeps.
INSTRUCTIONS_NOTE = "the system prompt is the rollout's base instructions; Codex may send a variant"


def is_rollout(path: Path) -> bool:
    for _, entry in objects(path, []):
        return entry.get("type") == "session_meta" and isinstance(entry.get("payload"), dict)
    return False


def read(path: Path) -> list[Session]:
    session = Session(path.stem, KIND)
    items: list[tuple[int, dict[str, Any]]] = []
    instructions: str | None = None
    model = "codex"
    for number, entry in objects(path, session.broken):
        kind, payload = entry.get("type"), entry.get("payload")
        if not isinstance(payload, dict):
            session.skipped[str(kind)] += 1
        elif kind == "response_item":
            items.append((number, payload))
        elif kind == "session_meta":
            session.name = str(payload.get("id") or session.name)
            instructions = _instructions(payload) or instructions
        elif kind == "turn_context":
            model = str(payload.get("model") or model)
        elif kind == "compacted":
            session.notes.append(f"line {number}: Codex compacted its own history here")
        elif kind not in BOOKKEEPING:
            session.skipped[str(kind)] += 1
    session.lacks.append(LACKS_TOOLS)
    if instructions is None:
        session.lacks.append(LACKS_INSTRUCTIONS)
    else:
        session.notes.append(INSTRUCTIONS_NOTE)
    session.turns = _turns(items, instructions, model)
    return [session]


def _instructions(meta: dict[str, Any]) -> str | None:
    for key in ("instructions", "base_instructions"):
        value = meta.get(key)
        if isinstance(value, dict):
            value = value.get("text")
        if isinstance(value, str) and value:
            return value
    return None


def _is_output(item: dict[str, Any]) -> bool:
    kind = item.get("type", "message")
    return kind in OUTPUTS or (kind == "message" and item.get("role") == "assistant")


def _turns(
    items: list[tuple[int, dict[str, Any]]], instructions: str | None, model: str
) -> list[Turn]:
    turns: list[Turn] = []
    for i, (number, item) in enumerate(items):
        before = items[i - 1][1] if i else None
        if not _is_output(item) or (before is not None and _is_output(before)):
            continue
        history = [it for _, it in items[:i]]
        if not history:
            continue
        raw: dict[str, Any] = {"model": model, "input": history}
        if instructions:
            raw["instructions"] = instructions
        turns.append(Turn(responses.to_neutral(raw).body, label=f"line {number}"))
    return turns
