"""none: forward the history as it came; the final gate still checks that it fits."""

from __future__ import annotations

from strategies.context import Context, StrategyResult
from strategies.messages import Message
from strategies.registry import register


@register("none")
def none(messages: list[Message], ctx: Context) -> StrategyResult:
    return list(messages), []
