"""OpenAI-chat JSONL: one chat completions request body per line, each a turn (what
`ctxproxy export` writes)."""

from __future__ import annotations

from pathlib import Path

from proxy.replay.lines import objects
from proxy.replay.session import Session, Turn

KIND = "chat-jsonl"


def is_chat(path: Path) -> bool:
    for _, body in objects(path, []):
        return isinstance(body.get("messages"), list)
    return False


def read(path: Path) -> list[Session]:
    session = Session(path.stem, KIND)
    for number, body in objects(path, session.broken):
        if isinstance(body.get("messages"), list) and body["messages"]:
            session.turns.append(Turn(body, label=f"line {number}"))
        else:
            session.skipped["no messages"] += 1
    if session.turns and not any(t.body.get("tools") for t in session.turns):
        session.notes.append("no request carries tool definitions")
    return [session]
