"""forget: the last tier. The oldest whole iterations leave the view behind a single marker.

An iteration (an assistant message with all its tool results, or a user turn) goes as one
block, so tool calls stay paired. Never forgotten: the prompts, the task (first user message),
the latest user message, the latest iteration and the keep window; below FORGET_ANY also the
first steps (`keep_first`); below LAST_RESORT the working set. The marker says what was left
out (how many messages and steps, which tools with their key arguments, which history
positions) and how to get it back, then carries the ledger (strategies/ledger.py): the
forgotten user messages and the statements the session depends on, verbatim. It sits where
the newest forgotten block was, led into the assistant message that follows (or standing alone
as an assistant message between two user turns), so no role sequence appears that the client
did not send. `sliding_window` is the same selection without marker, head or working set.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from itertools import groupby
from typing import Any

from strategies import ledger
from strategies.compact import MARKER
from strategies.context import FORGET_ANY, LAST_RESORT, Context, StrategyResult
from strategies.events import CompactionEvent
from strategies.lineage import Lineage
from strategies.messages import (
    PROMPT_ROLES,
    Message,
    content_size,
    iterations,
    protected_indexes,
    tool_calls,
)
from strategies.options import ForgetOptions
from strategies.registry import register
from strategies.state import runs
from strategies.working_set import first_steps, working_set

LABEL = "forget"
SEPARATOR = "\n\n"  # between a merged marker and its host's own text
KEY_ARGS = ("path", "file_path", "filename", "file", "cmd", "command", "query", "pattern", "url")
ARG_CHARS = 60
LEDGER_SLACK = 8  # tokens: a ledger measured line by line may count a little under its join


@dataclass(frozen=True)
class Unit:
    start: int  # view indexes [start, stop)
    stop: int
    droppable: bool


@register("forget")
def forget(messages: list[Message], ctx: Context) -> StrategyResult:
    return drop_oldest(messages, ctx, marker=True)


def drop_oldest(
    messages: list[Message], ctx: Context, *, marker: bool, reserve: int | None = None
) -> StrategyResult:
    if ctx.usage(messages) <= min(ctx.target, ctx.budget):
        return list(messages), []
    lineage = ctx.lineage or Lineage(messages)
    ctx = replace(ctx, lineage=lineage)
    view = _without_marker(messages, lineage) if marker else list(messages)
    held = set(working_set(view, ctx)) if marker else set()
    units = _units(view, ctx, held, marker)
    room = (_reserve(ctx, lineage) if reserve is None else reserve) if marker else 0
    dropped = _choose(view, units, held, ctx, room)
    for _ in range(3):  # a block brought back to keep roles alternating stays; choose again
        back = _keep_roles_alternating(view, units, dropped, lineage.raw, ctx)
        if not back or ctx.measure(sum(ctx.count(view[i]) for i in range(len(view))
                                       if i not in dropped) + room) <= ctx.target:  # fmt: skip
            break
        units = [replace(u, droppable=False) if u.start in back else u for u in units]
        dropped = _choose(view, units, held, ctx, room)
    _keep_roles_alternating(view, units, dropped, lineage.raw, ctx)
    if not dropped:
        return list(messages), []
    raw_dropped = [lineage.index(view[i]) for i in sorted(dropped)]
    before = set(lineage.forgotten)
    lineage.forget(raw_dropped)
    kept = [m for i, m in enumerate(view) if i not in dropped]
    if marker:
        kept = _with_ledger(kept, lineage, ctx)
        grown = ctx.usage(kept) - ctx.usage([m for i, m in enumerate(view) if i not in dropped])
        if grown > room and ctx.usage(kept) > ctx.target and reserve is None:
            # The marker came out longer than the room kept for it: choose again, once.
            lineage.forgotten = before
            return drop_oldest(messages, ctx, marker=marker, reserve=grown + 8)
    raw_iters = iterations(lineage.raw)
    event = CompactionEvent(
        LABEL if marker else "sliding_window",
        None,
        sorted({raw_iters[i] for i in raw_dropped}),
        ctx.usage(messages),
        ctx.usage(kept),
        sum(content_size(view[i]) for i in dropped),
        "oldest iterations forgotten behind a marker" if marker else "oldest iterations dropped",
    )
    return kept, [event]


def _choose(
    view: list[Message], units: list[Unit], held: set[int], ctx: Context, reserve: int
) -> set[int]:
    """The blocks to drop: oldest first, the working set last, until the view meets the
    target. Nothing while what must stay does not fit even alone: a deeper level first cuts
    what stays (the latest output), and then older steps need not all go."""
    counts = [ctx.count(m) for m in view]
    total = sum(counts)
    droppable = [u for u in units if u.droppable]
    floor = total - sum(sum(counts[u.start : u.stop]) for u in droppable)
    if ctx.measure(floor + reserve) > ctx.budget and ctx.pressure < LAST_RESORT:
        return set()
    dropped: set[int] = set()
    for unit in sorted(droppable, key=lambda u: bool(held.intersection(range(u.start, u.stop)))):
        if ctx.measure(total + reserve) <= ctx.target:
            break
        dropped.update(range(unit.start, unit.stop))
        total -= sum(counts[unit.start : unit.stop])
    return dropped


# --- which blocks may go ---------------------------------------------------------------------


def _units(view: list[Message], ctx: Context, held: set[int], marker: bool) -> list[Unit]:
    """The view's iterations, oldest first, each marked whether it may be forgotten now.

    With a marker (forget, not sliding_window): the first steps (`keep_first` of the budget)
    and the user's own messages stay below FORGET_ANY, the working set below LAST_RESORT.
    The head stands at the start of every later view, so what a firing changes begins after
    it and the model server's cache keeps it; a first look around a project is often needed
    again too."""
    iters = iterations(view)
    protected = protected_indexes(view, iters)
    users = [i for i, m in enumerate(view) if m.get("role") == "user"]
    task = users[0] if users else len(view)
    last = iters[-1] if iters else 0
    early = marker and ctx.pressure < FORGET_ANY
    keep = held if marker and ctx.pressure < LAST_RESORT else set()
    share = ctx.opts(ForgetOptions).keep_first
    head = first_steps(view, ctx, share, verbatim=True) if early else set()
    units = []
    for it, group in groupby(range(len(view)), key=lambda i: iters[i]):
        idx = list(group)
        if idx[0] in head:
            units.append(Unit(idx[0], idx[-1] + 1, False))
            continue
        droppable = (
            it >= 0
            and idx[0] > task
            and it <= last - ctx.keep_recent()
            and not protected.intersection(idx)
            and not keep.intersection(idx)
            and not any(view[i].get("role") in PROMPT_ROLES for i in idx)
        )
        units.append(Unit(idx[0], idx[-1] + 1, droppable))
    return units


def _keep_roles_alternating(
    view: list[Message],
    units: list[Unit],
    dropped: set[int],
    sent: Sequence[Message],
    ctx: Context,
) -> set[int]:
    """Bring back the cheapest dropped block that mends a junction wherever dropping would put
    two user (or two assistant) messages next to each other, until every junction is one the
    client sent (a client that sends two user messages in a row has no use for this). The
    cheapest, not the oldest: one step between the task and a large latest message may be all
    that fits."""
    allowed = {a.get("role") for a, b in zip(sent, sent[1:], strict=False) if _clash(a, b)}
    back: set[int] = set()
    changed = True
    while changed:
        changed = False
        kept = [i for i in range(len(view)) if i not in dropped]
        for a, b in zip(kept, kept[1:], strict=False):
            if b == a + 1 or not _clash(view[a], view[b]) or view[a].get("role") in allowed:
                continue
            unit = _bridge(view, units, a, b, ctx)
            if unit is not None:
                dropped.difference_update(range(unit.start, unit.stop))
                back.add(unit.start)
                changed = True
                break
    return back


def _bridge(view: list[Message], units: list[Unit], a: int, b: int, ctx: Context) -> Unit | None:
    """The cheapest block between kept messages `a` and `b` that, brought back alone, clashes
    with neither (the oldest among equals)."""
    fits = [
        u
        for u in units
        if a < u.start and u.stop <= b
        and not _clash(view[a], view[u.start]) and not _clash(view[u.stop - 1], view[b])
    ]  # fmt: skip
    return min(fits, key=lambda u: sum(ctx.count(view[i]) for i in range(u.start, u.stop)),
               default=None)  # fmt: skip


def _clash(a: Message, b: Message) -> bool:
    ra, rb = a.get("role"), b.get("role")
    return (ra, rb) == ("user", "user") or (ra, rb) == ("assistant", "assistant")


# --- the marker -------------------------------------------------------------------------------


def _reserve(ctx: Context, lineage: Lineage) -> int:
    """Tokens kept free for the marker while choosing what to drop: its head, and its ledger
    as it stands (a marker that comes out longer makes the choice run once more)."""
    size = _text_tokens(ctx)
    carried = ledger.render(lineage.raw, sorted(lineage.forgotten), _ledger_cap(ctx), size)
    return _cap(ctx) // 4 + size(carried) + 16


def _ledger_cap(ctx: Context) -> int:
    """The ledger's room in tokens: `ledger_share` of the room (the budget less the fixed part),
    so that a large fixed part does not leave the ledger more than compaction can free."""
    return ledger.cap_tokens(ctx.room(), ctx.opts(ForgetOptions).ledger_share)


def _with_ledger(kept: list[Message], lineage: Lineage, ctx: Context) -> list[Message]:
    """The marker placed with its ledger, within what the budget leaves beside the marker's
    head and what stays, so the ledger never makes a request fail; without it if even a
    measured ledger comes out over (token counts of lines and of their join can differ)."""
    forgotten = sorted(lineage.forgotten)
    head = marker_text(lineage.raw, forgotten, _cap(ctx))
    bare = _place_marker(list(kept), lineage, ctx, head)
    room = min(_ledger_cap(ctx), ctx.budget - ctx.usage(bare) - LEDGER_SLACK)
    carried = ledger.render(lineage.raw, forgotten, room, _text_tokens(ctx))
    if not carried:
        return bare
    full = _place_marker(list(kept), lineage, ctx, f"{head}\n{carried}")
    return full if ctx.usage(full) <= ctx.budget else bare


def _text_tokens(ctx: Context) -> Callable[[str], int]:
    """A text's tokens, less what any message costs (the ledger is summed line by line)."""
    empty = ctx.count({"role": "assistant", "content": ""})
    return lambda text: max(ctx.count({"role": "assistant", "content": text}) - empty, 1)


def _cap(ctx: Context) -> int:
    """The marker's length in characters: about 4% of the room, within 300..2,000."""
    return max(300, min(2000, int(ctx.room() * 0.04 * 4)))


def _without_marker(view: list[Message], lineage: Lineage) -> list[Message]:
    """The view with the previous marker taken out (a standalone one dropped, a merged one
    back to its host's form): the new marker will describe everything forgotten so far."""
    out = []
    for m in view:
        if lineage.label(m) != LABEL:
            out.append(m)
        elif not lineage.is_synthetic(m):
            out.append(_unmerged(m, lineage))
    return out


def _place_marker(kept: list[Message], lineage: Lineage, ctx: Context, text: str) -> list[Message]:
    """Put the marker where the first forgotten block was, without changing the latest turn
    and without two messages of one role in a row: led into the next assistant message, else
    into the nearest earlier one, else standing alone, else after the task's own text."""
    first = max(lineage.forgotten)
    at = next((k for k, m in enumerate(kept) if lineage.index(m) > first), len(kept))
    iters = iterations(kept)
    latest = iters[-1] if iters else -1
    users = [k for k, m in enumerate(kept) if m.get("role") == "user"]
    task = users[0] if users else -1
    hosts = [k for k in range(at, -1, -1) if k < len(kept) and k > task]
    host = next((k for k in hosts if _hosts(kept[k]) and iters[k] != latest), None)
    prev = kept[at - 1].get("role") if at > 0 else None
    nxt = kept[at].get("role") if at < len(kept) else None
    if host is not None:
        kept[host] = _merged(kept[host], text, lineage)
    elif prev != "assistant" and nxt != "assistant" or task < 0:
        msg = {"role": "assistant", "content": text}
        kept.insert(at, lineage.synthesize(msg, first, LABEL))
    else:
        kept[task] = _appended(kept[task], text, lineage)
    return kept


def _hosts(msg: Message) -> bool:
    return msg.get("role") == "assistant"


def _merged(host: Message, text: str, lineage: Lineage) -> Message:
    """An assistant message as it stands, its content led by the marker."""
    content = host.get("content")
    if isinstance(content, list):
        new = {**host, "content": [{"type": "text", "text": text}, *content]}
    else:
        new = {**host, "content": f"{text}{SEPARATOR}{content}" if content else text}
    return lineage.derive(new, lineage.origin(host), LABEL)


def _appended(task: Message, text: str, lineage: Lineage) -> Message:
    """The task with the marker after its own text, which stays whole."""
    content = task.get("content")
    if isinstance(content, list):
        new = {**task, "content": [*content, {"type": "text", "text": text}]}
    else:
        new = {**task, "content": f"{content}{SEPARATOR}{text}" if content else text}
    return lineage.derive(new, lineage.origin(task), LABEL)


def _unmerged(msg: Message, lineage: Lineage) -> Message:
    raw = lineage.origin(msg)
    if raw.get("role") == "user":
        return raw  # the task, which only had the marker after its own text
    content = msg.get("content")
    rest: Any
    if isinstance(content, list):
        rest = content[1:]
    elif isinstance(content, str) and SEPARATOR in content:
        rest = content.split(SEPARATOR, 1)[1]
    else:
        rest = raw.get("content")
    base = {**msg, "content": rest}
    # Which pass made the host's form is not kept; "tiered:3" is the deepest it could be.
    return raw if base == raw else lineage.derive(base, raw, "tiered:3")


def marker_text(raw: Sequence[Message], forgotten: Sequence[int], cap: int) -> str:
    """What was left out and how to get it back, within `cap` characters (the ledger follows
    it, see _with_ledger)."""
    iters = iterations(raw)
    steps = sorted({iters[i] for i in forgotten})
    ranges = ", ".join(f"{a}-{b - 1}" if b - a > 1 else str(a) for a, b in runs(forgotten))
    head = (
        f"{MARKER}{len(forgotten):,} earlier messages ({len(steps):,} steps, "
        f"{steps[0]}–{steps[-1]}) were omitted to fit the context window; history positions "
        f"{ranges}."
    )
    tail = (
        ' Get any of it back with the ctxproxy_recall tool: ref "history:<position>" or a '
        "query (words or a regular expression).]"
    )
    users = sum(1 for i in forgotten if raw[i].get("role") == "user")
    parts = [f" User messages among them: {users}."] if users else []
    for name, args in _calls(raw[i] for i in forgotten).items():
        listed = "; ".join(reversed([a for a in args if a][-6:]))
        parts.append(f" {name} ×{len(args)}" + (f" (latest first: {listed})" if listed else ""))
    body = "".join(parts)
    room = cap - len(head) - len(tail)
    if len(body) > room:
        body = body[: max(room - 1, 0)] + "…"
    return head + body + tail


def _calls(messages: Iterable[Message]) -> dict[str, list[str]]:
    """Tool name -> the key argument of each call ("" where none stands out)."""
    out: dict[str, list[str]] = {}
    for msg in messages:
        for call in tool_calls(msg):
            fn = call.get("function")
            if not isinstance(fn, dict):
                fn = {}
            out.setdefault(str(fn.get("name", "?")), []).append(_key_arg(fn.get("arguments")))
    return out


def _key_arg(arguments: object) -> str:
    try:
        value = json.loads(arguments) if isinstance(arguments, str) else None
    except ValueError:
        return ""
    if not isinstance(value, dict):
        return ""
    picked = next((value[k] for k in KEY_ARGS if isinstance(value.get(k), str)), None)
    picked = picked or next((v for v in value.values() if isinstance(v, str)), "")
    picked = " ".join(picked.split())
    return picked if len(picked) <= ARG_CHARS else picked[: ARG_CHARS - 1] + "…"
