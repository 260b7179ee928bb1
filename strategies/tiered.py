"""tiered: three phases on old iterations, each fired only if the previous left usage too high.

Phase 1 truncates old tool outputs to a head plus their evidence lines, phase 2 folds them to
a placeholder (the tool message and its tool_call_id stay), phase 3 folds old assistant text
and shortens tool-call arguments, keeping the call names and ids.
"""

from __future__ import annotations

from collections.abc import Callable

from strategies.base import (
    Context,
    Message,
    StrategyResult,
    compact_until,
    old_indexes,
    register,
    tool_names,
)
from strategies.forms import folded_output, skeleton, truncated

ROLES = {1: ("tool",), 2: ("tool",), 3: ("assistant",)}
REASONS = {
    1: "old tool outputs truncated to head and evidence",
    2: "old tool outputs folded to placeholders",
    3: "old assistant turns reduced to their tool-call skeleton",
}


def _transform(phase: int, messages: list[Message], ctx: Context) -> Callable:
    if phase == 1:
        head = int(ctx.option("truncate_chars", 200))
        return lambda cur, raw: truncated(raw, head)
    if phase == 2:
        names = tool_names(messages)
        return lambda cur, raw: folded_output(raw, names.get(raw.get("tool_call_id", ""), "?"))
    return lambda cur, raw: skeleton(raw)


@register("tiered")
def tiered(messages: list[Message], ctx: Context) -> StrategyResult:
    thresholds = tuple(ctx.option("thresholds", (0.6, 0.75, 0.9)))
    events = []
    for phase in (1, 2, 3):
        # Under pressure every phase may run; otherwise only past its own threshold.
        trigger = ctx.target if ctx.pressure >= 1 else int(thresholds[phase - 1] * ctx.budget)
        if ctx.usage(messages) <= max(trigger, ctx.target):
            continue
        messages, new = compact_until(
            messages,
            ctx,
            old_indexes(messages, ctx.keep_recent(), roles=ROLES[phase]),
            _transform(phase, messages, ctx),
            strategy="tiered",
            phase=phase,
            reason=REASONS[phase],
        )
        events += new
    return messages, events
