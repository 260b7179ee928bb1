"""What an importer hands the runner: a session's requests in the neutral chat form, and what
the source could not give."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Turn:
    """One request for an answer: its body in the neutral (OpenAI chat) form."""

    body: dict[str, Any]
    # Stored sessions only: the view the upstream received live, and the calibration it was
    # compiled with (the upstream's own counts moved it; a transcript has none).
    live_view: list[dict[str, Any]] | None = None
    factor: float | None = None
    window: int | None = None  # the window it was compiled at live
    label: str = ""  # where it came from (an exchange's seq, a transcript's line)


@dataclass
class Session:
    """One session from a source, its turns in order, and an account of what was left out."""

    name: str
    kind: str  # stored, claude-code, codex, chat-jsonl
    turns: list[Turn] = field(default_factory=list)
    skipped: Counter[str] = field(default_factory=Counter)  # unknown entry types, by type
    broken: list[str] = field(default_factory=list)  # "line N: why" for unreadable lines
    # What the live requests carried that the source lacks (the system prompt, tool
    # definitions): the replay says so, and counts `--fixed-tokens` for it.
    lacks: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # sidechains left apart, compactions seen


class SourceError(Exception):
    """A SOURCE that names nothing replayable; the message says what was looked for."""
