"""Line up an exchange's original messages with its compiled ones and say what became of each."""

from __future__ import annotations

import difflib
import itertools
import json
import re
from dataclasses import dataclass
from typing import Any

from strategies.messages import message_hash

# How markers name the raw message they replace: "original: /messages/<hash prefix>".
_REF = re.compile(r"original: /messages/([0-9a-f]{12,64})")
MAX_DIFF_LINES = 120


@dataclass(frozen=True)
class Row:
    """One original position (or a message only the compiled view has) and its fate."""

    original: int | None  # index in the request's messages
    compiled: int | None  # index in the compiled messages
    status: str  # kept, folded, truncated, elided, rewritten, dropped, added


def text(msg: dict[str, Any] | None) -> str:
    """What a reader compares: the content as text, then any tool calls as JSON."""
    if msg is None:
        return ""
    content = msg.get("content")
    if isinstance(content, list):
        parts = [p.get("text", "") if isinstance(p, dict) else str(p) for p in content]
        body = "\n".join(p if isinstance(p, str) else json.dumps(p) for p in parts)
    elif content is None:
        body = ""
    else:
        body = str(content)
    calls = msg.get("tool_calls")
    if isinstance(calls, list) and calls:
        body += ("\n" if body else "") + "\n".join(_call_line(c) for c in calls)
    return body


def _call_line(call: Any) -> str:
    fn = call.get("function") if isinstance(call, dict) else None
    if not isinstance(fn, dict):
        return "→ " + json.dumps(call, ensure_ascii=False)
    return f"→ {fn.get('name', '?')}({fn.get('arguments', '')})  [{call.get('id', '')}]"


def status_of(compiled: dict[str, Any]) -> str:
    """A rewritten message's kind, told by the marker its strategy left in it."""
    body = text(compiled)
    if "[Truncated" in body:
        return "truncated"
    if "[Output of tool" in body or "[Assistant text folded" in body:
        head = body.split("]", 1)[0]
        if "elided" in head:
            return "elided"
        if "folded" in head:
            return "folded"
    if "elided" in body:
        return "elided"
    if "folded" in body:
        return "folded"
    return "rewritten"


def align(original: list[dict[str, Any]], compiled: list[dict[str, Any]]) -> list[Row]:
    """Walk both lists in order: equal messages are kept; a marker's hash names the original
    of a rewritten message, or else its place relative to the next kept message does; the
    rest were dropped (only in the original) or added (only in the compiled view)."""
    return _Alignment(original, compiled).rows()


class _Alignment:
    def __init__(self, original: list[dict[str, Any]], compiled: list[dict[str, Any]]):
        self.original, self.compiled = original, compiled
        self.hashes: dict[int, str] = {}  # computed only for positions a marker makes us check
        self.index: dict[tuple[Any, ...], list[int]] = {}
        for k, msg in enumerate(original):
            self.index.setdefault(_fingerprint(msg), []).append(k)
        # For each compiled message, the next one that may be kept as is: an anchor.
        self.next_anchor = [len(compiled)] * (len(compiled) + 1)
        for j in range(len(compiled) - 1, -1, -1):
            after = j + 1
            probable = after < len(compiled) and _fingerprint(compiled[after]) in self.index
            self.next_anchor[j] = after if probable else self.next_anchor[after]

    def rows(self) -> list[Row]:
        rows: list[Row] = []
        i = 0
        for j, msg in enumerate(self.compiled):
            k = self.source(i, j)
            if k is None:
                rows.append(Row(None, j, "added"))
                continue
            rows.extend(Row(d, None, "dropped") for d in range(i, k))
            kept = self.original[k] == msg
            rows.append(Row(k, j, "kept" if kept else status_of(msg)))
            i = k + 1
        rows.extend(Row(d, None, "dropped") for d in range(i, len(self.original)))
        return rows

    def source(self, start: int, j: int) -> int | None:
        """The original position compiled[j] stands for, at or after `start`."""
        msg = self.compiled[j]
        found = self.equal(msg, start)
        if found is not None:
            return found
        ref = _REF.search(text(msg))
        if ref is not None:
            for k in range(start, len(self.original)):
                if self.hash(k).startswith(ref.group(1)):
                    return k
        # Counted back from the next kept message (a window dropped what came before it) …
        a = self.next_anchor[j]
        while a < len(self.compiled):
            kept_at = self.equal(self.compiled[a], start)
            if kept_at is not None:
                guess = kept_at - (a - j)
                if guess >= start and _same_slot(self.original[guess], msg):
                    return guess
                break
            a = self.next_anchor[a]
        # … or else the place right after the previous message.
        if start < len(self.original) and _same_slot(self.original[start], msg):
            return start
        return None

    def equal(self, msg: dict[str, Any], start: int) -> int | None:
        for k in self.index.get(_fingerprint(msg), ()):
            if k >= start and self.original[k] == msg:
                return k
        return None

    def hash(self, k: int) -> str:
        if k not in self.hashes:
            self.hashes[k] = message_hash(self.original[k])
        return self.hashes[k]


def _fingerprint(msg: dict[str, Any]) -> tuple[Any, ...]:
    """Cheap, and equal for equal messages: narrows the search before comparing in full."""
    content = msg.get("content")
    head = content[:64] if isinstance(content, str) else type(content).__name__
    size = len(content) if isinstance(content, str | list) else 0
    return (msg.get("role"), msg.get("tool_call_id"), size, head)


def _same_slot(a: dict[str, Any], b: dict[str, Any]) -> bool:
    return a.get("role") == b.get("role") and a.get("tool_call_id") == b.get("tool_call_id")


@dataclass(frozen=True)
class Diff:
    lines: list[tuple[str, str]]  # (add | del | hunk | ctx | cut, text)
    added: int
    removed: int


def diff(before: str, after: str) -> Diff:
    """A unified diff of two texts; past MAX_DIFF_LINES, its head and tail around one note."""
    lines = difflib.unified_diff(before.splitlines(), after.splitlines(), lineterm="", n=1)
    lines = itertools.islice(lines, 2, None)  # the ---/+++ header names nothing useful here
    kinds = [(_KINDS.get(line[:1], "ctx"), line) for line in lines]
    added = sum(k == "add" for k, _ in kinds)
    removed = sum(k == "del" for k, _ in kinds)
    if len(kinds) > MAX_DIFF_LINES:
        half = MAX_DIFF_LINES // 2
        note = ("cut", f"… {len(kinds) - 2 * half:,} diff lines not shown …")
        kinds = [*kinds[:half], note, *kinds[-half:]]
    return Diff(kinds, added, removed)


_KINDS = {"+": "add", "-": "del", "@": "hunk"}
