"""tiered: three phases on old iterations, each fired only if the previous left usage too high.

Phase 1 truncates old tool outputs to a head plus their evidence lines, phase 2 folds them to
a placeholder that keeps a few of the most telling evidence lines (the tool message and its
tool_call_id stay), phase 3 folds old assistant text and shortens tool-call arguments, keeping
the call names and ids; over budget it also folds old tool outputs to bare placeholders.

The newest tool output that carries error evidence is what the next step most likely needs:
phases 2 and 3 leave it alone until the last resort (pressure 3), and then take it last.
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
    text_of,
    tool_names,
)
from strategies.evidence import bears_evidence
from strategies.forms import folded_output, skeleton, truncated

REASONS = {
    1: "old tool outputs truncated to head and evidence",
    2: "old tool outputs folded to placeholders that keep their key evidence lines",
    3: "old assistant turns reduced to their tool-call skeleton",
}


def _transform(phase: int, messages: list[Message], ctx: Context) -> Callable:
    if phase == 1:
        head = int(ctx.option("truncate_chars", 200))
        return lambda cur, raw: truncated(raw, head)
    names = tool_names(messages)

    def fold(raw: Message, keep_evidence: bool) -> Message | None:
        name = names.get(raw.get("tool_call_id", ""), "?")
        return folded_output(raw, name, keep_evidence=keep_evidence)

    if phase == 2:
        return lambda cur, raw: fold(raw, True)
    return lambda cur, raw: fold(raw, False) if raw.get("role") == "tool" else skeleton(raw)


def _candidates(phase: int, messages: list[Message], ctx: Context) -> list[int]:
    """Oldest first; for phases 2 and 3 without the newest error output, or with it last."""
    tools = old_indexes(messages, ctx.keep_recent(), roles=("tool",))
    if phase == 1:
        return tools
    latest = latest_error(messages, ctx)
    if latest in tools:
        tools.remove(latest)
        if ctx.pressure >= 3:
            tools.append(latest)
    if phase == 2:
        return tools
    assistants = old_indexes(messages, ctx.keep_recent(), roles=("assistant",))
    return assistants + (tools if ctx.pressure >= 1 else [])


def latest_error(messages: list[Message], ctx: Context) -> int | None:
    """Index of the latest tool message whose raw text carries error evidence."""
    for i in range(len(messages) - 1, -1, -1):
        if messages[i].get("role") != "tool":
            continue
        raw = ctx.lineage.origin(messages[i]) if ctx.lineage else messages[i]
        text = text_of(raw)
        if text and bears_evidence(text):
            return i
    return None


@register("tiered")
def tiered(messages: list[Message], ctx: Context) -> StrategyResult:
    thresholds = tuple(ctx.option("thresholds", (0.6, 0.75, 0.9)))
    events = []
    for phase in (1, 2, 3):
        # Under pressure every phase may run; otherwise only past its own threshold.
        trigger = ctx.target if ctx.pressure >= 1 else int(thresholds[phase - 1] * ctx.budget)
        if ctx.usage(messages) <= max(trigger, ctx.target):
            continue
        reason = REASONS[phase]
        if phase == 3 and ctx.pressure >= 1:
            reason += "; over budget, old tool outputs folded to bare placeholders"
        messages, new = compact_until(
            messages,
            ctx,
            _candidates(phase, messages, ctx),
            _transform(phase, messages, ctx),
            strategy="tiered",
            phase=phase,
            reason=reason,
        )
        events += new
    return messages, events
