"""fold: old long tool outputs and old assistant thoughts become byte-stable placeholders."""

from __future__ import annotations

from strategies.compact import compact_until
from strategies.context import Context, StrategyResult
from strategies.forms import folded_output, folded_text
from strategies.messages import Message, old_indexes, text_of, tool_calls, tool_names
from strategies.options import FoldOptions
from strategies.registry import register


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
