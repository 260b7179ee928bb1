"""tiered: three phases on old iterations, each only while the previous left the view over target.

Phase 1 truncates old tool outputs to a head plus their evidence lines, phase 2 folds them to
a placeholder that keeps a few of the most telling evidence lines (the tool message and its
tool_call_id stay), phase 3 folds old assistant text and shortens tool-call arguments, keeping
the call names and ids; over budget it also folds old tool outputs to bare placeholders.

The working set (the newest error output and the newest failing-test list) is what the next
step most likely needs: phases 2 and 3 leave it alone until the last resort (pressure 3), and
then take it last. Old long user messages (pasted logs) fold like tool output in phase 2.
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
from strategies.forms import folded_output, folded_user, skeleton, truncated
from strategies.working_set import working_set

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
        if raw.get("role") == "user":
            return folded_user(raw, min_chars=int(ctx.option("user_min_chars", 2000)))
        name = names.get(raw.get("tool_call_id", ""), "?")
        return folded_output(raw, name, keep_evidence=keep_evidence)

    if phase == 2:
        return lambda cur, raw: fold(raw, True)
    return lambda cur, raw: fold(raw, False) if raw.get("role") == "tool" else skeleton(raw)


def _candidates(phase: int, messages: list[Message], ctx: Context) -> list[int]:
    """Oldest first; for phases 2 and 3 without the working set, or with it last."""
    tools = old_indexes(messages, ctx.keep_recent(), roles=("tool",))
    if phase == 1:
        return tools
    held = [i for i in working_set(messages, ctx) if i in tools]
    tools = [i for i in tools if i not in held]
    last = held if ctx.pressure >= 3 else []
    if phase == 2:
        users = old_indexes(messages, ctx.keep_recent(), roles=("user",))
        return sorted(tools + users) + last
    assistants = old_indexes(messages, ctx.keep_recent(), roles=("assistant",))
    return assistants + (tools + last if ctx.pressure >= 1 else [])


@register("tiered")
def tiered(messages: list[Message], ctx: Context) -> StrategyResult:
    events = []
    for phase in (1, 2, 3):
        if ctx.usage(messages) <= ctx.target:
            break
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
