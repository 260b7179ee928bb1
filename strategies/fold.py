"""fold: old long tool outputs and old assistant thoughts become byte-stable placeholders."""

from __future__ import annotations

from strategies.base import (
    Context,
    Message,
    StrategyResult,
    compact_until,
    old_indexes,
    register,
    text_of,
    tool_calls,
    tool_names,
)
from strategies.forms import folded_output, folded_text
from strategies.options import FoldOptions


@register("fold")
def fold(messages: list[Message], ctx: Context) -> StrategyResult:
    names = tool_names(messages)
    min_chars = ctx.opts(FoldOptions).min_chars

    def transform(current: Message, raw: Message) -> Message | None:
        if raw.get("role") == "tool":
            text = text_of(raw)
            if text is not None and len(text) < min_chars:
                return None
            return folded_output(raw, names.get(raw.get("tool_call_id", ""), "?"))
        # Only the thoughts that accompany calls: a plain answer may be what the user reads.
        return folded_text(raw) if tool_calls(raw) else None

    return compact_until(
        messages,
        ctx,
        old_indexes(messages, ctx.keep_recent()),
        transform,
        strategy="fold",
        reason="old tool outputs and assistant thoughts folded to placeholders",
    )
