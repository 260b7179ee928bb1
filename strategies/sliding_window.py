"""sliding_window: drop whole oldest iterations, never a tool call without its results.

The prompts, the first user message (the task), the latest user message and the final turn stay.
"""

from __future__ import annotations

from itertools import groupby

from strategies.base import (
    CompactionEvent,
    Context,
    Message,
    StrategyResult,
    content_size,
    iterations,
    protected_indexes,
    register,
)


def _droppable(messages: list[Message], keep_recent: int) -> list[tuple[int, list[int]]]:
    """(iteration, indexes that may go) for the old iterations, oldest first."""
    iters = iterations(messages)
    protected = protected_indexes(messages, iters)
    cutoff = (iters[-1] if iters else 0) - keep_recent
    units = []
    for it, group in groupby(range(len(messages)), key=lambda i: iters[i]):
        idx = [i for i in group if i not in protected]
        if it >= 0 and it <= cutoff and idx:
            units.append((it, idx))
    return units


@register("sliding_window")
def sliding_window(messages: list[Message], ctx: Context) -> StrategyResult:
    raw = [ctx.count(m) for m in messages]
    total = before = sum(raw)
    dropped: set[int] = set()
    gone: list[int] = []
    for it, idx in _droppable(messages, ctx.keep_recent()):
        if ctx.measure(total) <= ctx.target:
            break
        dropped.update(idx)
        total -= sum(raw[i] for i in idx)
        gone.append(ctx.lineage.iteration(messages[idx[0]], it) if ctx.lineage else it)
    if not dropped:
        return list(messages), []
    event = CompactionEvent(
        "sliding_window",
        None,
        gone,
        ctx.measure(before),
        ctx.measure(total),
        sum(content_size(messages[i]) for i in dropped),
        "oldest iterations dropped",
    )
    return [m for i, m in enumerate(messages) if i not in dropped], [event]
