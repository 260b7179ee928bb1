"""Claude Code's transcripts (~/.claude/projects/<project>/<session>.jsonl) as sessions.

Each line is an entry. `user` and `assistant` entries carry a Messages API message; an
assistant message streamed in several blocks is written as several entries with one message
id. Entries link to their parent by uuid; a `compact_boundary` (Claude Code's own compaction)
starts a new chain whose first user message is its summary. Sidechains (a Task tool's
subagent) are conversations of their own. One request for an answer was made per assistant
message: its history is the chain before it. The system prompt and tool definitions were
never written to the file."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from proxy.formats import anthropic
from proxy.replay.lines import objects
from proxy.replay.session import Session, Turn

KIND = "claude-code"
MESSAGES = ("user", "assistant")
# Entries that are Claude Code's own bookkeeping, never sent to the model: not "unknown".
BOOKKEEPING = (
    "summary",
    "file-history-snapshot",
    "queue-operation",
    "system",
    "last-prompt",
    "mode",
)
# Context Claude Code renders into its requests from these (agent and skill listings, task
# reminders): links in the chain, their rendering not written.
ATTACHMENT = "attachment"
LACKS = (
    "the system prompt, tool definitions and the context Claude Code renders from attachments "
    "(it does not write them)"
)


def is_transcript(path: Path) -> bool:
    """A Claude Code transcript: its first entries carry a sessionId and a Claude Code type."""
    for _, entry in objects(path, []):
        if "sessionId" in entry and entry.get("type") in (*MESSAGES, *BOOKKEEPING):
            return True
        if entry.get("type") == "summary" and "leafUuid" in entry:
            continue
        return False
    return False


def read(path: Path) -> list[Session]:
    session = Session(path.stem, KIND, lacks=[LACKS])
    main: list[tuple[int, dict[str, Any]]] = []
    links: dict[Any, dict[str, Any]] = {}  # every entry in a chain, by uuid
    sidechain = 0
    for number, entry in objects(path, session.broken):
        kind = entry.get("type")
        if "uuid" in entry and not entry.get("isSidechain"):
            links[entry["uuid"]] = entry
        if kind in MESSAGES and isinstance(entry.get("message"), dict):
            if entry.get("isSidechain"):
                sidechain += 1
            else:
                main.append((number, entry))
        elif kind == ATTACHMENT:
            continue
        elif kind == "system" and entry.get("subtype") == "compact_boundary":
            session.notes.append(f"line {number}: Claude Code compacted its own history here")
        elif kind not in BOOKKEEPING:
            session.skipped[str(kind)] += 1
    if sidechain:
        session.notes.append(f"{sidechain} sidechain (subagent) entries left apart")
    session.turns = _turns(main, links)
    return [session]


def _turns(
    entries: list[tuple[int, dict[str, Any]]], by_uuid: dict[Any, dict[str, Any]]
) -> list[Turn]:
    """One turn per assistant message (its streamed blocks joined): the chain before it."""
    turns: list[Turn] = []
    model = "claude"
    seen: set[Any] = set()
    for number, entry in entries:
        message = entry["message"]
        if entry["type"] != "assistant":
            continue
        ident = message.get("id") or entry.get("uuid")
        if ident in seen:
            continue
        seen.add(ident)
        model = message.get("model") or model
        chain = _chain(by_uuid, entry.get("parentUuid"))
        history = _messages(chain)
        if not history:
            continue
        raw = {"model": model, "max_tokens": 32000, "messages": history}
        turns.append(Turn(anthropic.to_neutral(raw).body, label=f"line {number}"))
    return turns


def _chain(by_uuid: dict[Any, dict[str, Any]], uuid: Any) -> list[dict[str, Any]]:
    """The entries from the chain's root to `uuid`, oldest first."""
    out: list[dict[str, Any]] = []
    seen: set[Any] = set()
    while uuid is not None and uuid in by_uuid and uuid not in seen:
        seen.add(uuid)
        entry = by_uuid[uuid]
        out.append(entry)
        uuid = entry.get("parentUuid")
    out.reverse()
    return out


def _messages(chain: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The chain as Messages API messages: an assistant message's blocks joined, consecutive
    user entries (tool results, then text) as one message, as Claude Code sends them."""
    out: list[dict[str, Any]] = []
    last_id: Any = None
    for entry in chain:
        message = entry.get("message")
        if entry.get("type") not in MESSAGES or not isinstance(message, dict):
            continue
        role = message.get("role", entry["type"])
        blocks = _blocks(message.get("content"))
        ident = message.get("id") if role == "assistant" else None
        if out and out[-1]["role"] == role and (role == "user" or ident == last_id):
            out[-1]["content"] = [*out[-1]["content"], *blocks]
        else:
            out.append({"role": role, "content": blocks})
        last_id = ident
    return out


def _blocks(content: Any) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return [b for b in content if isinstance(b, dict)] if isinstance(content, list) else []
