"""sliding_window: drop whole oldest iterations, never a tool call without its results.

The prompts, the first user message (the task), the latest user message and the final turn stay;
no two user (or assistant) messages end up next to each other unless the client sent them so.
The same selection as `forget`, without its marker and its working set.
"""

from __future__ import annotations

from strategies.context import Context, StrategyResult
from strategies.forget import drop_oldest
from strategies.messages import Message
from strategies.registry import register


@register("sliding_window")
def sliding_window(messages: list[Message], ctx: Context) -> StrategyResult:
    return drop_oldest(messages, ctx, marker=False)
