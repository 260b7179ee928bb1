"""tiered: three phases on old iterations, each only while the previous left the view over target.

Phase 1 truncates old tool outputs to a head plus their evidence lines (an array of JSON
records instead becomes a table that keeps every value: strategies/dense.py), phase 2 folds them to
a placeholder that keeps a few of the most telling evidence lines (the tool message and its
tool_call_id stay), phase 3 folds old assistant text and shortens tool-call arguments, keeping
the call names and ids; over budget it also folds old tool outputs to bare placeholders.

The working set (the newest error output and the newest failing-test list) is what the next
step most likely needs: phase 2 folds it (keeping its evidence) only once the keep window is
gone, phase 3 makes it bare only as the last resort. So does the newest read of a file the
agent is editing (strategies/reads.py), which no phase truncates: an edit copies from it. Old
long user messages (pasted logs) fold like tool output in phase 2.

Two things no phase touches before the last resort: small outputs (a file listing, a short
status: SMALL_TOKENS), whose fold frees little and costs a re-run when they are needed again,
and the first steps `forget` keeps (keep_first), which stay verbatim or not at all.
"""

from __future__ import annotations

from collections.abc import Callable

from strategies.compact import compact_until
from strategies.context import (
    ALL_PHASES,
    FORGET_ANY,
    LAST_RESORT,
    NO_KEEP_WINDOW,
    Context,
    StrategyResult,
)
from strategies.dense import dense_output
from strategies.forms import folded_output, folded_user, skeleton, truncated
from strategies.messages import Message, iterations, old_indexes, tool_names
from strategies.options import ForgetOptions, TieredOptions
from strategies.reads import live_reads
from strategies.registry import register
from strategies.traceback import last_resort_indexes
from strategies.working_set import first_steps, footing, raw_count

# A fold leaves a placeholder of ~40 tokens and frees the rest; when the output is needed
# again the agent re-runs the call, which costs a step and the output's tokens anew. Below
# 256 tokens a fold frees under ~216 tokens (about 3% of an 8k window's room) against that
# step: a 27-line listing (~150 tokens) freed ~110 and was re-run 5-6 times a task.
SMALL_TOKENS = 256

REASONS = {
    1: "old tool outputs truncated to head and evidence, or their JSON records made tables",
    2: "old tool outputs folded to placeholders that keep their key evidence lines",
    3: "old assistant turns reduced to their tool-call skeleton",
}


def _transform(phase: int, messages: list[Message], ctx: Context) -> Callable:
    names = tool_names(messages)
    if phase == 1:
        head = ctx.opts(TieredOptions).truncate_chars
        return lambda cur, raw: (
            dense_output(raw, names.get(raw.get("tool_call_id", ""), "?")) or truncated(raw, head)
        )

    def fold(raw: Message, keep_evidence: bool) -> Message | None:
        if raw.get("role") == "user":
            return folded_user(raw, min_chars=ctx.opts(TieredOptions).user_min_chars)
        name = names.get(raw.get("tool_call_id", ""), "?")
        return folded_output(raw, name, keep_evidence=keep_evidence)

    if phase == 2:
        return lambda cur, raw: fold(raw, True)
    return lambda cur, raw: fold(raw, False) if raw.get("role") == "tool" else skeleton(raw)


def _candidates(phase: int, messages: list[Message], ctx: Context) -> list[int]:
    """Oldest first; the footing (working set, live reads) folds (keeping its evidence) only
    once the keep window is gone, and goes bare only as the last resort, after everything
    else. Small outputs and the kept first steps wait for the last resort."""
    spared = _spared(messages, ctx)
    tools = [i for i in old_indexes(messages, ctx.keep_recent(), ("tool",)) if i not in spared]
    if phase == 1:
        reads = set(live_reads(messages, ctx))
        return [i for i in tools if i not in reads]
    held = [i for i in footing(messages, ctx) if i in tools]
    tools = [i for i in tools if i not in held]
    if phase == 2:
        users = old_indexes(messages, ctx.keep_recent(), roles=("user",))
        folded = held if ctx.pressure >= NO_KEEP_WINDOW else []
        if ctx.pressure >= LAST_RESORT:
            # The task and the latest user message (when not in the latest turn), then the
            # latest turn's own outputs: placeholders with their evidence, after all else.
            last = [i for i in last_resort_indexes(messages) if i not in tools + users + folded]
            users += [i for i in last if i in protected_users(messages)]
            latest = [i for i in last if messages[i].get("role") == "tool"]
            return sorted(set(tools + users + folded)) + latest
        return sorted(set(tools + users + folded))
    assistants = old_indexes(messages, ctx.keep_recent(), roles=("assistant",))
    bare = held if ctx.pressure >= LAST_RESORT else []
    return assistants + (tools + bare if ctx.pressure >= ALL_PHASES else [])


def _spared(messages: list[Message], ctx: Context) -> set[int]:
    """Outputs no phase touches below the last resort: small ones, and (below FORGET_ANY,
    while `forget` keeps them) those of the first steps."""
    if ctx.pressure >= LAST_RESORT:
        return set()
    small = {
        i
        for i, m in enumerate(messages)
        if m.get("role") == "tool" and raw_count(m, ctx) < SMALL_TOKENS
    }
    if ctx.pressure >= FORGET_ANY:
        return small
    return small | first_steps(messages, ctx, ForgetOptions().keep_first)


def protected_users(messages: list[Message]) -> set[int]:
    """The task and the latest user message, unless they are part of the latest turn."""
    iters = iterations(messages)
    users = [i for i, m in enumerate(messages) if m.get("role") == "user"]
    return {i for i in users[:1] + users[-1:] if iters[i] != iters[-1]}


@register("tiered")
def tiered(messages: list[Message], ctx: Context) -> StrategyResult:
    events = []
    for phase in (1, 2, 3):
        if ctx.usage(messages) <= ctx.target:
            break
        reason = REASONS[phase]
        if phase == 3 and ctx.pressure >= ALL_PHASES:
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


def fold_newest(messages: list[Message], ctx: Context) -> StrategyResult:
    """The light step: old tool outputs folded newest first (those just behind the keep
    window), so what changes sits near the end of the view and the prefix before it stays in
    the model server's cache. The footing is left alone, and so are short outputs (a
    config file, a one-line answer): little room to gain, and often the exact value needed."""
    held = set(footing(messages, ctx)) | _spared(messages, ctx)
    tools = [i for i in old_indexes(messages, ctx.keep_recent(), ("tool",)) if i not in held]
    names = tool_names(messages)
    fold = _transform(2, messages, ctx)

    def table_or_fold(cur: Message, raw: Message) -> Message | None:
        # A table keeps every value of an output of records in about half its room.
        return dense_output(raw, names.get(raw.get("tool_call_id", ""), "?")) or fold(cur, raw)

    return compact_until(
        messages,
        ctx,
        reversed(tools),
        table_or_fold,
        strategy="tiered",
        phase=2,
        reason="the newest old tool outputs folded to placeholders, or their records made "
        "tables (a light step near the end)",
    )
