"""Room is used: the newest output and the latest user message, when a pass left them short,
get back the longest form of their text that fits (strategies/fit.py), never less than that.

An output bigger than the room is what the next step reads (its head holds a page token, its
middle the entry the user asked about); a fold or a forgetting would leave the model a line
naming the call. After a firing, whatever room the budget leaves goes to them: the raw message
when it fits, else its head, tail, evidence and the lines the pending call or the newest user
or assistant text names (a JSON output stays valid JSON), with the ref of the original.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from strategies.calls import call_of
from strategies.context import Context
from strategies.fit import json_form, names_in, parsed, text_form
from strategies.lineage import Lineage
from strategies.messages import (
    Message,
    iterations,
    original_ref,
    recall_ref,
    text_of,
    with_content,
)
from strategies.working_set import newest_output

LABEL = "cut"
MIN_GAIN = 32  # tokens: less spare room than this is not worth a new form
NAMES_FROM = 2000  # characters of each naming text read for its names
KEEPS = (None, LABEL, "forget")  # raw, cut already, or a marker's host: left as they are
STRING_STEP = 16  # characters a JSON form's strings keep per level (strategies/fit.py)


def use_room(view: list[Message], ctx: Context, budget: int) -> list[Message]:
    """The view with the newest output and the latest user message (when it is the latest
    turn) in the longest form that keeps the view within `budget`, newest first."""
    lineage = ctx.lineage
    if lineage is None:
        return view
    out = list(view)
    for k in sorted(_candidates(out, lineage), reverse=True):
        cur = out[k]
        raw = lineage.origin(cur)
        text = text_of(raw)
        if lineage.label(cur) in KEEPS or text is None or budget - ctx.usage(out) < MIN_GAIN:
            continue
        rest = sum(ctx.count(m) for i, m in enumerate(out) if i != k)
        if ctx.measure(rest + ctx.count(raw)) <= budget:
            out[k] = raw
            continue
        best = _longest(raw, text, lineage.raw, rest, ctx, budget)
        if best is not None and ctx.count(best) > ctx.count(cur):
            out[k] = lineage.derive(best, cur, LABEL)
    return out


def refit(view: list[Message], ctx: Context, budget: int) -> list[Message]:
    """The newest output, when it stands cut, cut again for what the newest user and
    assistant texts name now (a question about it came after the cut): the same size or less,
    so the view stays within `budget`; the view itself when nothing changes. It stands near
    the end of the view, so the prefix before it stays in the model server's cache."""
    lineage = ctx.lineage
    if lineage is None:
        return view
    out = list(view)
    for k in newest_output(out):
        cur = out[k]
        raw = lineage.origin(cur)
        text = text_of(raw)
        if lineage.label(cur) != LABEL or text is None:
            continue
        rest = sum(ctx.count(m) for i, m in enumerate(out) if i != k)
        room = min(budget, ctx.measure(rest + ctx.count(cur)))
        best = _longest(raw, text, lineage.raw, rest, ctx, room)
        if best is not None and best.get("content") != cur.get("content"):
            out[k] = lineage.derive(best, cur, LABEL)
    return out if any(a is not b for a, b in zip(out, view, strict=True)) else view


def _candidates(view: Sequence[Message], lineage: Lineage) -> list[int]:
    """The newest output's messages, and the latest user message when it is the latest turn
    (once the agent has moved on, a paste that filled the room would make every later turn
    fire)."""
    found = newest_output(view)
    iters = iterations(view)
    users = [k for k, m in enumerate(view) if m.get("role") == "user" and iters[k] == iters[-1]]
    return sorted(set(found) | set(users[-1:]))


def _names(raw: Sequence[Message], msg: Message) -> tuple[str, ...]:
    """What the pending call and the newest user and assistant texts name (`msg` aside)."""
    texts: list[str] = []
    seen: set[str] = set()
    for m in reversed(raw):
        role = m.get("role")
        if m is msg or role not in ("user", "assistant") or role in seen:
            continue
        text = text_of(m)
        if text:
            seen.add(str(role))
            texts.append(text[:NAMES_FROM])
        if len(seen) == 2:
            break
    call = call_of(raw, msg.get("tool_call_id")) if msg.get("role") == "tool" else None
    if call:
        texts.append(str(call.get("arguments") or "")[:NAMES_FROM])
    return names_in(texts)


def _longest(
    raw: Message, text: str, lineage_raw: Sequence[Message], rest: int, ctx: Context, budget: int
) -> Message | None:
    """Binary search on the size: the longest form that fits. JSON by the items and fields
    kept (a JSON output whose smallest form does not fit is cut as text), text by characters."""
    names = _names(lineage_raw, raw)
    value = parsed(text)
    if value is not None:
        ref = f"ctxproxy_recall original: {original_ref(raw)}"
        best = _search(
            lambda level: with_content(raw, json_form(value, text, names, level, ref)),
            1, _widest(value), rest, ctx, budget,
        )  # fmt: skip
        if best is not None:
            return best
    call = call_of(lineage_raw, raw.get("tool_call_id")) if raw.get("role") == "tool" else None
    what = f"Output of tool '{call.get('name', '?') if call else '?'}'"
    what = "User message" if raw.get("role") == "user" else what
    first = raw.get("role") != "user"

    def note(kept: int, total: int) -> str:
        return (
            f"[{what} cut to fit the context window: kept {kept:,} of {total:,} lines "
            f"({len(text):,} chars in full); {recall_ref(raw)}]"
        )

    return _search(
        lambda chars: with_content(raw, text_form(text, names, chars, note, note_first=first)),
        0, len(text), rest, ctx, budget,
    )  # fmt: skip


def _widest(value: Any) -> int:
    """The most items of any array or fields of any object in `value`, or the level whose
    strings keep the longest one whole: past it, a JSON form keeps everything, so the search
    for the longest form that fits stops there."""
    widest, stack = 1, [value]
    while stack:
        v = stack.pop()
        if isinstance(v, str):
            widest = max(widest, -(-len(v) // STRING_STEP))
        elif isinstance(v, dict | list):
            widest = max(widest, len(v))
            stack.extend(v.values() if isinstance(v, dict) else v)
    return widest


def _search(
    make: Callable[[int], Message], lo: int, hi: int, rest: int, ctx: Context, budget: int
) -> Message | None:
    best = None
    while lo <= hi:
        mid = (lo + hi) // 2
        form = make(mid)
        if ctx.measure(rest + ctx.count(form)) <= budget:
            best, lo = form, mid + 1
        else:
            hi = mid - 1
    return best


def cut_to_fit(
    raw: Message, lineage_raw: Sequence[Message], rest: int, ctx: Context, budget: int
) -> Message | None:
    """`raw` (an output or a user paste) in its longest cut form that keeps `rest` tokens
    and itself within `budget`, or None (the fill cuts a forgotten step it brings back)."""
    text = text_of(raw)
    return None if text is None else _longest(raw, text, lineage_raw, rest, ctx, budget)
