"""The loop every compacting strategy shares: smaller forms, message by message, until a goal."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from functools import partial

from strategies.context import Context, StrategyResult
from strategies.events import CompactionEvent
from strategies.lineage import Lineage
from strategies.messages import Message, content_size, iterations, text_of

# (current form, raw original) -> a smaller replacement, or None to leave the message alone.
Transform = Callable[[Message, Message], "Message | None"]

_MARKER = re.compile(
    r"^\[(?:… [\d,]+ (?:similar )?lines? elided …|Truncated — [\d,]+ chars removed[^\]]*"
    r"|Output of tool '.*' (?:folded|elided): .*|Assistant text folded: .*)\]$",
    re.MULTILINE,
)


MARKER = "[ctxproxy: "  # how a forget marker begins


def looks_compacted(msg: Message) -> bool:
    """A marker in the content: used only when no lineage says what the raw message was."""
    text = text_of(msg)
    return bool(text and _MARKER.search(text))


MIN_GAIN = 0.9  # a new form must cut at least a tenth of the message's tokens
# How far a pass reduces a message: a pass leaves alone what an equal or deeper pass made.
# A forget marker (merged into a kept message or standing alone) is left to `forget` alone.
DEPTH = {
    "cut": 1,
    "dense": 1,
    "traceback": 1,
    "tiered:1": 1,
    "fold": 2,
    "tiered:2": 2,
    "tiered:3": 3,
}
DEPTH["forget"] = 9


def compact_until(
    messages: list[Message],
    ctx: Context,
    candidates: Iterable[int],
    transform: Transform,
    *,
    strategy: str,
    phase: int | None = None,
    reason: str,
) -> StrategyResult:
    """Replace candidates (oldest first) by their smaller forms until the view meets the target.

    One event for the whole pass, none when nothing shrank. The input list is not modified.
    """
    out = list(messages)
    raw = [ctx.count(m) for m in out]
    total = sum(raw)
    before = ctx.measure(total)
    lineage = ctx.lineage or Lineage(messages)
    label = strategy if phase is None else f"{strategy}:{phase}"
    iters = iterations(out)
    touched: set[int] = set()
    removed = 0
    for i in candidates:
        if ctx.measure(total) <= ctx.target:
            break
        cur = out[i]
        done = lineage.label(cur)
        if done is not None and DEPTH.get(done, 0) >= DEPTH.get(label, 0) > 0 or done == label:
            continue
        if ctx.lineage is None and looks_compacted(cur):
            continue  # never re-truncate: the marker's counts would drift
        origin = lineage.origin(cur)
        new = lineage.form(origin, label, partial(transform, cur, origin))
        if new is None or (n := ctx.count(new)) > MIN_GAIN * raw[i]:
            continue  # a marginal gain is not worth changing a message the prefix cache holds
        lineage.derive(new, cur, label)
        removed += content_size(out[i]) - content_size(new)
        total += n - raw[i]
        raw[i], out[i] = n, new
        touched.add(lineage.iteration(new, iters[i]))
    if not touched:
        return list(messages), []
    after = ctx.measure(total)
    event = CompactionEvent(strategy, phase, sorted(touched), before, after, removed, reason)
    return out, [event]
