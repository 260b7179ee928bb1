"""Side requests an agent makes about its own conversation join that conversation's session.

A client without a session header is placed by its history's fingerprint (proxy/sessions.py).
Agents also send one-off requests about the conversation they are in: aider summarises its
own chat history, Qwen Code runs a memory subagent over it, other clients ask for a title.
Such a request begins differently (its own system prompt, the history quoted inside one
message), so its fingerprint is new. It is told by what it holds: a request that would open a
new fingerprint session and either carries on a recent session's conversation (its first
message, at least 64 characters, is one of that session's) or, offering no tools, is mostly
text already seen in one recent session's messages, is a side request of that session.

The index is per process, of the most recent sessions, and rebuilt as requests arrive: after
a restart, or on another worker, a side request opens a session of its own as before.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

from proxy.sessions import SessionKey

MIN_LINE = 24  # shorter lines ("# USER", "Ok.") say nothing about which conversation it is
QUOTED = 0.5  # share of a side request's text that must be lines of the one conversation
MIN_QUOTED = 64  # characters at least, so a short new chat never joins an older one
SESSIONS = 256  # recent fingerprint sessions remembered per process
LINES = 20_000  # lines remembered per session (the newest)


class Conversations:
    """Recent fingerprint sessions and the lines of their messages, to place side requests."""

    def __init__(self, sessions: int = SESSIONS, lines: int = LINES) -> None:
        self.max_sessions, self.max_lines = sessions, lines
        self.lines: OrderedDict[str, dict[int, None]] = OrderedDict()  # session -> line hashes
        self.seen: dict[str, set[int]] = {}  # session -> its messages' texts, hashed
        self.where: dict[int, set[str]] = {}  # line hash -> sessions holding it

    def place(self, key: SessionKey, body: dict[str, Any]) -> SessionKey:
        """`key`, or the session this side request is about; the request's lines are indexed."""
        if key.source != "fingerprint":
            return key
        messages = [m for m in body.get("messages") or [] if isinstance(m, dict)]
        if key.id not in self.lines:
            home = self._continued(messages, key.owner)
            if home is None and not body.get("tools"):
                home = self._quoted(messages, key.owner)
            if home is not None:
                return SessionKey(home, "side", key.owner)
        self._index(key.id, messages)
        return key

    def _continued(self, messages: list[dict[str, Any]], owner: str | None) -> str | None:
        """The session whose conversation this one carries on under another system prompt
        (Qwen Code's memory subagent resends the conversation itself): its first message."""
        said = [m for m in messages if m.get("role") not in ("system", "developer")]
        first = _text(said[0]) if said else ""
        if len(first) < MIN_QUOTED:
            return None
        h = hash(first)
        mine = (s for s in reversed(self.seen) if owner is None or s.startswith(owner + ":"))
        return next((s for s in mine if h in self.seen[s]), None)

    def _quoted(self, messages: list[dict[str, Any]], owner: str | None) -> str | None:
        """The one session whose lines make up most of these messages' text, if any."""
        said = [
            line
            for m in messages
            if m.get("role") not in ("system", "developer")
            for line in _lines(m)
        ]
        total = sum(len(line) for line in said) or 1
        quoted: dict[str, int] = {}
        for line in dict.fromkeys(said):
            for session in self.where.get(hash(line), ()):
                quoted[session] = quoted.get(session, 0) + len(line)
        mine = {s: n for s, n in quoted.items() if owner is None or s.startswith(owner + ":")}
        best = max(mine, key=mine.__getitem__, default=None)
        if best is None or mine[best] < max(MIN_QUOTED, QUOTED * total):
            return None
        return best

    def _index(self, session: str, messages: list[dict[str, Any]]) -> None:
        lines = self.lines.setdefault(session, {})
        self.lines.move_to_end(session)
        # Agents rewrite their histories (aider moves finished exchanges ahead of its file
        # messages): index every message not indexed before, not only the tail.
        done = self.seen.setdefault(session, set())
        for m in messages:
            if m.get("role") not in ("user", "assistant", "tool"):
                continue
            text = _text(m)
            if hash(text) in done:
                continue
            done.add(hash(text))
            for line in _split(text):
                self._add(session, lines, hash(line))
        while len(self.lines) > self.max_sessions:
            old, hashes = self.lines.popitem(last=False)
            self.seen.pop(old, None)
            for h in hashes:
                self._drop(old, h)

    def _add(self, session: str, lines: dict[int, None], h: int) -> None:
        if h in lines:
            return
        lines[h] = None
        self.where.setdefault(h, set()).add(session)
        if len(lines) > self.max_lines:  # the oldest line goes
            oldest = next(iter(lines))
            del lines[oldest]
            self._drop(session, oldest)

    def _drop(self, session: str, h: int) -> None:
        holders = self.where.get(h)
        if holders is not None:
            holders.discard(session)
            if not holders:
                del self.where[h]


def _text(message: dict[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, list):
        return "\n".join(str(p.get("text") or "") for p in content if isinstance(p, dict))
    return content if isinstance(content, str) else ""


def _split(text: str) -> list[str]:
    """The text line by line, stripped; long enough lines only."""
    return [s for line in text.splitlines() if len(s := line.strip()) >= MIN_LINE]


def _lines(message: dict[str, Any]) -> list[str]:
    return _split(_text(message))
