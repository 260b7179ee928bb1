"""The compact forms of one message: truncated, folded to a placeholder, reduced to a skeleton.

Every form is a pure function of the raw message, so it is byte-stable from turn to turn.
"""

from __future__ import annotations

import json
import re
from typing import Any

from strategies.elide import render
from strategies.evidence import evidence, ranked
from strategies.fit import parsed
from strategies.memo import text_cache
from strategies.messages import (
    Message,
    canonical_json,
    recall_ref,
    text_of,
    tool_calls,
    with_content,
)
from strategies.reports import naming_lines

MAX_EVIDENCE_LINES = 40  # phase-1 keeps the last ones: the final error is nearest the end
# A placeholder that keeps evidence keeps only the most telling lines: a fold must stay small.
EXCERPT_LINES = 8
EXCERPT_CHARS = 600
# A failing-test report keeps each failure's name and place beside its `E` lines: more room,
# still a fraction of the report (which runs to thousands of characters when it fails).
REPORT_LINES = 24
REPORT_CHARS = 1600
ARG_CHARS = 40
USER_HEAD_CHARS = 300  # a folded user message keeps its first lines up to this length
_NOTE = "[Truncated — 00,000 chars removed; ctxproxy_recall original: /messages/0123456789abcdef]"
_SHORTENED = re.compile(r"…\[\+[\d,]+ chars\]$")


def _size(msg: Message) -> tuple[int, int] | None:
    """(chars, lines) of the content, or None when there is no content to fold."""
    content = msg.get("content")
    if content is None or content == "" or content == []:
        return None
    text = text_of(msg)
    text = text if text is not None else canonical_json(content)
    return len(text), text.count("\n") + 1


def folded_output(msg: Message, name: str, *, keep_evidence: bool = False) -> Message | None:
    """A placeholder naming the original; with keep_evidence, followed by up to EXCERPT_LINES of
    the output's error evidence, verbatim and in their original order."""
    size = _size(msg)
    if msg.get("role") != "tool" or size is None:
        return None
    chars, lines = size
    text = text_of(msg) if keep_evidence else None
    lead = leading_fields(text) if text else None
    kept = (lead,) if lead else excerpt(text) if text else ()
    note = f", {len(kept)} evidence {'line' if len(kept) == 1 else 'lines'} kept" if kept else ""
    note = ", its leading fields kept" if lead else note
    header = (
        f"[Output of tool '{name}' folded: {chars:,} chars, {lines:,} "
        f"{'line' if lines == 1 else 'lines'}{note}; {recall_ref(msg)}]"
    )
    return with_content(msg, "\n".join((header, *kept)))


def folded_user(msg: Message, *, min_chars: int) -> Message | None:
    """An old long user message (a pasted log) as a placeholder plus its evidence lines; the
    task and the latest user message are protected elsewhere and never come here."""
    text = text_of(msg)
    if msg.get("role") != "user" or text is None or len(text) < min_chars:
        return None
    kept = excerpt(text)
    lines = text.count("\n") + 1
    note = f", {len(kept)} evidence {'line' if len(kept) == 1 else 'lines'} kept" if kept else ""
    header = (
        f"[User message folded: {len(text):,} chars, {lines:,} "
        f"{'line' if lines == 1 else 'lines'}{note}; {recall_ref(msg)}]"
    )
    # The user's own words usually come first, before what they pasted.
    head = text[:USER_HEAD_CHARS].rsplit("\n", 1)[0] if "\n" in text[:USER_HEAD_CHARS] else ""
    return with_content(msg, "\n".join((header, *([head, "…"] if head else []), *kept)))


@text_cache()
def leading_fields(text: str) -> str | None:
    """A JSON object's leading short scalar fields, as compact JSON within EXCERPT_CHARS: what
    identifies a result (an id, a total, a status) comes first in it; None for anything else."""
    value = parsed(text)
    if not isinstance(value, dict):
        return None
    kept: dict[str, Any] = {}
    for key, field in value.items():
        short = isinstance(field, int | float | bool) or (
            isinstance(field, str) and len(field) <= ARG_CHARS
        )
        if short:
            kept[key] = field
            if len(json.dumps(kept, ensure_ascii=False)) > EXCERPT_CHARS:
                del kept[key]
                break
    return json.dumps(kept, ensure_ascii=False, separators=(",", ":")) if kept else None


@text_cache()
def excerpt(text: str) -> tuple[str, ...]:
    """The most telling evidence lines that fit EXCERPT_LINES and EXCERPT_CHARS, in text order;
    for a failing-test report, first the lines naming each failure and its place, within
    REPORT_LINES and REPORT_CHARS.

    Cached: an old output is folded again on every turn of a session.
    """
    lines = text.split("\n")
    best = ranked(lines)
    names = naming_lines(lines)
    order = [*best[:1], *names, *best[1:]] if names else best
    most, room = (REPORT_LINES, REPORT_CHARS) if names else (EXCERPT_LINES, EXCERPT_CHARS)
    picked: list[int] = []
    used = 0
    seen: set[str] = set()
    for i in order:
        if len(picked) == most:
            break
        line = lines[i]
        if line not in seen and used + len(line) + 1 <= room:
            seen.add(line)  # the same failure twice tells nothing new
            picked.append(i)
            used += len(line) + 1
    return tuple(lines[i] for i in sorted(picked))


def folded_text(msg: Message) -> Message | None:
    """An assistant message whose text became a placeholder; its tool calls untouched."""
    size = _size(msg)
    if msg.get("role") != "assistant" or size is None:
        return None
    return with_content(msg, f"[Assistant text folded: {size[0]:,} chars; {recall_ref(msg)}]")


def truncated(msg: Message, head_chars: int) -> Message | None:
    """Head of the output, its evidence lines and last line, and one marker with the total cut."""
    text = text_of(msg)
    if msg.get("role") != "tool" or text is None or len(text) <= head_chars + 120:
        return None
    body, removed = _truncate(text, head_chars)
    if len(body) + len(_NOTE) > 0.9 * len(text):
        return None  # would not pay for itself; skip hashing the original for the marker
    note = f"[Truncated — {removed:,} chars removed; {recall_ref(msg)}]"
    return with_content(msg, f"{body}\n{note}")


@text_cache()
def _truncate(text: str, head_chars: int) -> tuple[str, int]:
    """Cached: an old output is truncated again on every turn of a session."""
    lines = text.split("\n")
    head, used = set(), 0
    for i, line in enumerate(lines):
        used += len(line) + 1
        if used > head_chars:
            break
        head.add(i)
    keep = head | set(sorted(evidence(lines))[-MAX_EVIDENCE_LINES:]) | _last_line(lines, head_chars)
    parts = render(lines, keep, [False] * len(lines))
    if not head:
        # The first line alone is longer than the head: show its start rather than nothing.
        parts.insert(0, lines[0][:head_chars])
    kept = sum(len(lines[i]) + 1 for i in keep) + (0 if head else head_chars)
    return "\n".join(parts), max(len(text) - kept, 0)


def _last_line(lines: list[str], limit: int) -> set[int]:
    """The last non-blank line, which often holds the verdict (exit status, exception, summary)."""
    for i in range(len(lines) - 1, -1, -1):
        if lines[i].strip():
            return {i} if len(lines[i]) <= max(limit, 200) else set()
    return set()


def skeleton(msg: Message) -> Message | None:
    """An assistant message with its text folded and long tool-call arguments shortened."""
    if msg.get("role") != "assistant":
        return None
    new = folded_text(msg) or dict(msg)
    calls = msg.get("tool_calls")
    if tool_calls(msg) and isinstance(calls, list):
        new["tool_calls"] = [_short_call(c) for c in calls]
    return new if new != msg else None


def _short_call(call: Any) -> Any:
    fn = call.get("function") if isinstance(call, dict) else None
    if not isinstance(fn, dict) or not isinstance(fn.get("arguments"), str):
        return call
    return {**call, "function": {**fn, "arguments": shorten_arguments(fn["arguments"])}}


def shorten_arguments(arguments: str) -> str:
    """Long string values shortened; the result stays valid JSON since templates parse it."""
    try:
        value = json.loads(arguments)
    except ValueError:
        return arguments
    short = json.dumps(_shorten(value), ensure_ascii=False, separators=(",", ":"))
    return short if len(short) < len(arguments) else arguments


def _shorten(value: Any) -> Any:
    if isinstance(value, str):
        if len(value) <= ARG_CHARS or _SHORTENED.search(value):
            return value
        return f"{value[:ARG_CHARS]}…[+{len(value) - ARG_CHARS:,} chars]"
    if isinstance(value, dict):
        return {k: _shorten(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_shorten(v) for v in value]
    return value
