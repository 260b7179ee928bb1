"""How a transcript an agent CLI wrote compares with the requests it made through ctxproxy."""

from __future__ import annotations

import re
from typing import Any

# Context Claude Code renders into a request from its attachments, never written as such.
REMINDER = re.compile(r"<system-reminder>.*?</system-reminder>", re.DOTALL)


def differences(
    written: list[dict[str, Any]], sent: list[dict[str, Any]], system: bool
) -> list[str]:
    """Where the messages read from a transcript differ from those a request carried; `system`
    False leaves system messages out of both (a CLI that renders them into each request and
    never writes them). A user message or tool result the CLI sent with its rendered context
    around the words the transcript holds (Claude Code's system reminders) counts as the
    same."""
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
    if not isinstance(a, str) or not isinstance(b, str) or "<system-reminder>" not in b:
        return False
    rest = {k: v for k, v in written.items() if k != "content"}
    same = rest == {k: v for k, v in sent.items() if k != "content"}
    return same and REMINDER.sub("", b).strip() == a.strip()
