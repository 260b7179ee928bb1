"""How a transcript an agent CLI wrote compares with the requests it made through ctxproxy."""

from __future__ import annotations

from typing import Any


def differences(
    written: list[dict[str, Any]], sent: list[dict[str, Any]], system: bool
) -> list[str]:
    """Where the messages read from a transcript differ from those a request carried; `system`
    False leaves system messages out of both (a CLI that renders them into each request and
    never writes them). A user message the CLI sent with its context put before the words
    the transcript holds (Claude Code's system reminders) counts as the same."""
    if not system:
        written = [m for m in written if m.get("role") != "system"]
        sent = [m for m in sent if m.get("role") != "system"]
    out = []
    if len(written) != len(sent):
        out.append(f"{len(written)} messages read, {len(sent)} sent")
    for i, (a, b) in enumerate(zip(written, sent, strict=False)):
        if a != b and not _prefixed(a, b):
            out.append(f"message {i}: read {str(a)[:200]} sent {str(b)[:200]}")
    return out


def _prefixed(written: dict[str, Any], sent: dict[str, Any]) -> bool:
    a, b = written.get("content"), sent.get("content")
    same_role = written.get("role") == sent.get("role") == "user"
    return same_role and isinstance(a, str) and isinstance(b, str) and b.endswith(a) and bool(a)
