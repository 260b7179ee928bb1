"""The `ctxproxy_recall` tool: what a placeholder or marker left out, got back from the raw history.

The session's raw history for this branch is the request's own message list, exactly as it
was stored before forwarding: a ref names a message in it (`/messages/<hash prefix>`, the
form placeholders carry) or a position (`history:12`, `history:3-9`, the form markers carry);
a query searches every message's text, tool-call arguments and names. Nothing else is
reachable, so a session can recall only its own history.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from proxy.recall import refs, units
from proxy.recall.search import BadQuery, Deadline, Search, compile_query
from proxy.store import ExchangeDetail

NAME = "ctxproxy_recall"
CONTEXT_LINES = 2  # around a matching line that is in no function or failure block
WHOLE_LINES = 40  # a tool output this short is one unit, like a message
HEAD_TOKENS = 60  # kept free for the result's first line
MIN_ROOM = 64  # tokens: below this, say the window is full instead of cutting to nothing
CHARS_PER_TOKEN = 8  # generous: text gathered beyond room * this would be cut anyway

DEFINITION: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": NAME,
        "description": (
            "Get back conversation content that was folded or left out to fit the context "
            'window. Pass `ref` as a placeholder or marker names it ("/messages/<id>" or '
            '"history:<position>") for the original text, or `query` (words or a regular '
            "expression) to search the whole conversation, tool outputs included."
        ),
        "parameters": {
            "type": "object",
            "properties": {
                "ref": {"type": "string", "description": "/messages/<id> or history:<n>"},
                "query": {"type": "string", "description": "words or a regular expression"},
            },
        },
    },
}

MAX_ARGUMENTS = 8000  # characters of a call's arguments read at all: a call is far shorter


@dataclass(frozen=True)
class Recalled:
    """A tool result and how it went: ok, truncated, not_found, no_match, bad_call, no_room
    (or, from the rounds: over_cap, timeout, error)."""

    text: str
    outcome: str
    tokens: int = 0


NO_ROOM = Recalled(
    "[ctxproxy: no room is left in the context window for recalled text this turn; "
    "answer from what you have.]",
    "no_room",
)


def wanted(body: dict[str, Any], tools_supported: bool) -> bool:
    """Whether the client lets us add a tool: not when it forbids tools or forces one."""
    choice, n = body.get("tool_choice"), body.get("n")
    forced = choice == "none" or choice == "required" or isinstance(choice, dict)
    return tools_supported and not forced and n in (None, 1)


def with_tool(body: dict[str, Any]) -> dict[str, Any]:
    """`body` with the recall tool after the client's own (their prefix stays as it was)."""
    tools = [t for t in body.get("tools") or [] if not is_recall_tool(t)]
    return {**body, "tools": [*tools, DEFINITION]}


def as_forwarded(detail: ExchangeDetail) -> ExchangeDetail:
    """An exchange as it went upstream: with the recall tool offered (`recalls` is a list, empty
    when it went uncalled), the request carried it after the client's own tools."""
    if detail.recalls is None:
        return detail
    return dataclasses.replace(detail, compiled_request=with_tool(detail.compiled_request))


def without_tool(body: dict[str, Any]) -> dict[str, Any]:
    """`body` as the client sent it, tool-wise: for a last round that must answer."""
    out = dict(body)
    tools = [t for t in out.get("tools") or [] if not is_recall_tool(t)]
    if tools:
        out["tools"] = tools
    else:
        out.pop("tools", None)
        out.pop("tool_choice", None)
    return out


def is_recall_tool(tool: Any) -> bool:
    return isinstance(tool, dict) and _named(tool.get("function"))


def is_recall_call(call: Any) -> bool:
    return isinstance(call, dict) and _named(call.get("function"))


def _named(function: Any) -> bool:
    return isinstance(function, dict) and function.get("name") == NAME


def run(
    arguments: Any,
    messages: Sequence[dict[str, Any]],
    hashes: Sequence[str],
    room: int,
    count: Callable[[str], int],
    seconds: float = 1.0,
) -> Recalled:
    """Answer one call's JSON `arguments` from `messages`, within `room` tokens and `seconds`."""
    if isinstance(arguments, str) and len(arguments) > MAX_ARGUMENTS:
        return _bad(f"the arguments are {len(arguments):,} characters; a ref or a query is short")
    try:
        args = json.loads(arguments) if isinstance(arguments, str) else arguments
    except (ValueError, RecursionError):
        return _bad('the arguments are not valid JSON; pass {"ref": "..."} or {"query": "..."}')
    if not isinstance(args, dict):
        return _bad('pass an object: {"ref": "..."} or {"query": "..."}')
    ref, query = args.get("ref"), args.get("query")
    limit = max(room, 0) * CHARS_PER_TOKEN  # gather no more text than room could ever show
    if isinstance(ref, str) and ref.strip():
        text, outcome = _by_ref(ref, messages, hashes, limit)
    elif isinstance(query, str) and query.strip():
        try:
            search = compile_query(query)
        except BadQuery as exc:
            return _bad(str(exc))
        if room < MIN_ROOM:  # before the search: it would be for nothing
            return NO_ROOM
        text, outcome = _by_query(search, query, messages, room, count, Deadline(seconds))
    else:
        return _bad('give a non-empty "ref" (e.g. "history:12") or "query" (words or a regex)')
    if outcome not in ("ok", "truncated"):  # a short answer (nothing found, a bad ref)
        return Recalled(text, outcome, count(text))
    return _fit(text, outcome, room, count) if room >= MIN_ROOM else NO_ROOM


def _bad(why: str) -> Recalled:
    return Recalled(f"[ctxproxy_recall: {why}.]", "bad_call")


def _by_ref(
    ref: str, messages: Sequence[dict[str, Any]], hashes: Sequence[str], limit: int
) -> tuple[str, str]:
    named = refs.read(ref)
    if named is None:
        return (
            f'[ctxproxy_recall: "{ref[:80]}" is not a ref; refs look like "/messages/<id>" or '
            '"history:<position>". To search, pass "query" instead.]',
            "bad_call",
        )
    positions: Sequence[int]
    if named.digest is not None:
        found = [i for i, h in enumerate(hashes) if h.startswith(named.digest)]
        if not found:
            return (
                f"[ctxproxy_recall: no message {ref.strip()[:80]} in this conversation.]",
                "not_found",
            )
        positions = found[-1:]  # the same message twice is the same text: give the newest
    else:
        positions = range(named.first, min(named.last, len(messages) - 1) + 1)
        if not positions:
            return (
                f"[ctxproxy_recall: the conversation has positions 0-{len(messages) - 1}; "
                f"{ref.strip()[:80]} is past its end.]",
                "not_found",
            )
    calls, parts, size = _calls(messages), [], 0
    for i in positions:
        parts.append(_whole(i, messages[i], calls))
        size += len(parts[-1])
        if size > limit:  # the rest could not be shown anyway
            break
    return "\n\n".join(parts), "ok"


def _by_query(
    search: Search,
    query: str,
    messages: Sequence[dict[str, Any]],
    room: int,
    count: Callable[[str], int],
    deadline: Deadline,
) -> tuple[str, str]:
    """Whole units around the hits (units.py), newest message first, as many as fit `room`
    tokens; each unit once, however many hits or copies of it there are."""
    sections: list[str] = []
    shown: set[str] = set()
    skipped: list[int] = []
    hits, calls, used, searched = 0, _calls(messages), 0, 0
    for i in range(len(messages) - 1, -1, -1):
        if deadline.passed():
            break
        searched += 1
        text = _text(messages[i])
        found = search.lines(text)
        if not found:
            continue
        hits += len(found)
        lines = text.split("\n")
        for start, stop in _spans(messages[i], lines, found):
            body = "\n".join(lines[start:stop])
            if body in shown:
                continue
            where = "" if (start, stop) == (0, len(lines)) else f" lines {start + 1}-{stop}"
            section = f"{_label(i, messages[i], calls)[:-4]}{where} ---\n{body}"
            too_long = len(section) > room * CHARS_PER_TOKEN  # never worth counting
            cost = room if too_long else count(section)
            if sections and used + cost > room - HEAD_TOKENS:
                skipped.append(i)
                continue
            shown.add(body)
            sections.append(section)
            used += cost
    stopped = _stopped(searched, len(messages), False)
    how = "" if search.how == "regex" else f", searched as {search.how}"
    if not sections:
        return (
            f'[ctxproxy_recall: nothing in this conversation matches "{query[:80]}"{how}'
            f"{stopped}; a re-read will not find it here either.]",
            "no_match",
        )
    while True:  # whole units only: the last goes while the whole answer is over the room
        text = _head(hits, len(sections), how + stopped, skipped) + "\n\n" + "\n\n".join(sections)
        if len(sections) == 1 or count(text) <= room:
            return text, "truncated" if skipped else "ok"
        sections.pop()
        skipped.append(-1)


def _head(hits: int, units: int, how: str, skipped: list[int]) -> str:
    more = ""
    if skipped:
        places = ", ".join(f"history:{i}" for i in sorted({i for i in skipped if i >= 0})[:8])
        more = (
            f"; {len(skipped)} more not shown for room ({places}): narrow it with a more "
            "specific query"
        )
    return (
        f"[ctxproxy_recall: {hits} matching lines; {units} whole "
        f"{'unit' if units == 1 else 'units'} (function, failure block or message), "
        f"newest first{how}{more}]"
    )


def _spans(msg: dict[str, Any], lines: list[str], found: list[int]) -> list[tuple[int, int]]:
    """The units holding the hits, merged where they overlap, in text order."""
    if msg.get("role") != "tool" or len(lines) <= WHOLE_LINES:
        return [(0, len(lines))]  # a message (or a short output) is its own unit
    spans = sorted(
        units.report_block(lines, n)
        or units.enclosing_definition(lines, n)
        or (max(n - CONTEXT_LINES, 0), min(n + CONTEXT_LINES + 1, len(lines)))
        for n in found
    )
    merged: list[tuple[int, int]] = []
    for start, stop in spans:
        if merged and start < merged[-1][1]:
            merged[-1] = (merged[-1][0], max(stop, merged[-1][1]))
        else:
            merged.append((start, stop))
    return merged


def _stopped(searched: int, total: int, full: bool) -> str:
    if searched >= total or full:
        return ""
    return f" (the search's time ran out after {searched} of {total} messages)"


def _fit(text: str, outcome: str, room: int, count: Callable[[str], int]) -> Recalled:
    """Cut `text` to `room` tokens, saying what was cut and how to narrow."""
    whole = len(text)
    text = text[: room * CHARS_PER_TOKEN]  # never count what could not be shown
    tokens = count(text)
    if tokens <= room and len(text) == whole:
        return Recalled(text, outcome, tokens)
    note = (
        "\n[ctxproxy_recall: cut here, {:,} of {:,} characters shown; narrow it with a more "
        'specific query, or a single "history:<position>".]'
    )
    keep = min(len(text), int(len(text) * room / max(tokens, 1) * 0.95))
    while keep > 0:
        cut = text[:keep] + note.format(keep, whole)
        if (used := count(cut)) <= room:
            return Recalled(cut, "truncated", used)
        keep = int(keep * 0.85)
    return Recalled("[ctxproxy_recall: no room for any of it.]", "no_room")


def _whole(i: int, msg: dict[str, Any], calls: dict[str, str]) -> str:
    return f"{_label(i, msg, calls)}\n{_text(msg)}"


def _label(i: int, msg: dict[str, Any], calls: dict[str, str]) -> str:
    """`--- history:7 (tool read_file {"path": "a.py"}) ---`: where it is, who said it."""
    role = msg.get("role", "?")
    name = calls.get(msg.get("tool_call_id") or "") or msg.get("name") or ""
    return f"--- history:{i} ({role}{' ' + name if name else ''}) ---"


def _calls(messages: Sequence[dict[str, Any]]) -> dict[str, str]:
    """Each tool call's id, with the name and (the start of) the arguments it was made with."""
    named = {}
    for msg in messages:
        for call in msg.get("tool_calls") or []:
            fn = call.get("function") if isinstance(call, dict) else None
            if isinstance(fn, dict) and isinstance(call.get("id"), str):
                args = str(fn.get("arguments") or "")
                named[call["id"]] = f"{fn.get('name', '')} {args[:80]}".strip()
    return named


def _text(msg: dict[str, Any]) -> str:
    """Everything searchable in a message: its text, then each tool call's name and arguments."""
    content = msg.get("content")
    if isinstance(content, list):  # multimodal: its text parts
        texts = [p.get("text") for p in content if isinstance(p, dict)]
        parts = [t for t in texts if isinstance(t, str)]
    else:
        parts = [content if isinstance(content, str) else ""]
    for call in msg.get("tool_calls") or []:
        fn = call.get("function") if isinstance(call, dict) else None
        if isinstance(fn, dict):
            parts.append(f"{fn.get('name', '')}({fn.get('arguments', '')})")
    return "\n".join(p for p in parts if p)
