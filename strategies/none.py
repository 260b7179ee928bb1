"""none: forward the history as it came; the final gate still checks that it fits."""

from __future__ import annotations

from strategies.base import Context, Message, StrategyResult, register


@register("none")
def none(messages: list[Message], ctx: Context) -> StrategyResult:
    return list(messages), []
