"""The seam between the route and the strategies: budget from the window, view from the pipeline."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel

from proxy import recall
from proxy.errors import ContextLengthExceeded
from proxy.settings import CompactionSettings
from proxy.tokens import REPLY_PRIMING, TokenCounter
from strategies import CompactionEvent, OverBudget, Plan, compile_view, get
from strategies.state import ViewState

# Tokens a step leaves free under the budget when the recall tool may be offered, so that a
# recalled excerpt fits (rounds.USEFUL_ROOM, plus the call's wrapping, is less).
RECALL_ROOM = 256


@dataclass(frozen=True)
class Compiled:
    messages: list[dict]  # the view to send upstream (new list; input never mutated)
    tokens_original: int  # estimate for the whole original prompt (messages + tools)
    tokens_compiled: int
    budget: int | None  # None when the window is unknown: then no compaction
    window: int | None
    events: list[CompactionEvent] = field(default_factory=list)
    state: ViewState | None = None  # the decisions to store for the session's next turn
    factor: float = 1.0  # the calibration the estimates were made with
    raw_prompt: int = 0  # the uncorrected count behind tokens_compiled's estimate

    def summary(self) -> str:
        """For the X-Ctxproxy-Compaction header: the passes that fired for this request, in
        order of first use, or "none" when the view only carries over earlier turns' passes."""
        labels = list(dict.fromkeys(e.label for e in self.events if not e.replayed))
        return ",".join(labels) or "none"


def compile_request(
    body: dict,
    *,
    window: int | None,
    settings: CompactionSettings,
    counter: TokenCounter,
    prior: ViewState | None = None,
) -> Compiled:
    """Compile the view of `body`'s messages; `prior` is the session branch's stored state for
    a prefix of them (None for a new session: the history is compiled as one arrival)."""
    messages = list(body.get("messages") or [])
    tools_raw = counter.count_tools(body.get("tools") or None)
    factor = counter.correction
    if window is None:
        raw = sum(counter.count_message(m) for m in messages) + REPLY_PRIMING + tools_raw
        original = counter.estimate(raw)
        return Compiled(messages, original, original, None, None, [], None, factor, raw)
    tools_tokens = counter.estimate(tools_raw)
    budget = message_budget(body, window, settings, tools_tokens)
    recalls = any(recall.is_recall_tool(t) for t in body.get("tools") or [])
    plan = make_plan(settings, budget, RECALL_ROOM if recalls else 0)
    try:
        try:
            result = compile_view(
                messages, plan, counter.count_message, _measure(counter), prior=prior
            )
        except OverBudget:
            if prior is None:
                raise
            # What the stored view holds (a marker, forms) cannot shrink enough: a fresh
            # compile of the whole history may still fit, and a refusal would lose the turn.
            result = compile_view(messages, plan, counter.count_message, _measure(counter))
    except OverBudget as exc:
        largest = None
        if exc.largest is not None:
            index, role, tokens = exc.largest
            largest = (index, role, counter.estimate(tokens))
        raise ContextLengthExceeded(
            exc.needed + tools_tokens, budget + tools_tokens, window, largest
        ) from exc
    original = counter.estimate(result.original_tokens + REPLY_PRIMING + tools_raw)
    raw = result.state.view_tokens + REPLY_PRIMING + tools_raw
    return Compiled(
        result.view,
        original,
        counter.estimate(raw),
        budget,
        window,
        result.events,
        result.state,
        factor,
        raw,
    )


def message_budget(body: dict, window: int, settings: CompactionSettings, tools: int) -> int:
    """window - completion reserve - safety margin - tool schemas: what messages may use."""
    reserve = _positive_int(body.get("max_completion_tokens"))
    reserve = reserve or _positive_int(body.get("max_tokens")) or settings.reserve_tokens
    return window - reserve - math.ceil(settings.safety_margin * window) - tools


def make_plan(settings: CompactionSettings, budget: int, excerpt: int = 0) -> Plan:
    """Settings become plain options per strategy, so strategies never see settings. Trigger
    and target are shares; the pipeline applies them to the room left after the fixed part
    (prompts, task) and `excerpt`, the tokens kept free for a recalled excerpt."""
    for name in settings.pipeline:
        get(name)  # an unknown name fails here, with the list of known ones
    budget = max(budget, 0)
    trigger = math.floor(settings.trigger * budget)
    target = min(math.floor(settings.target * budget), trigger)
    options = {name: _options(settings, name) for name in settings.pipeline}
    return Plan(settings.pipeline, budget, target, trigger, options, excerpt=excerpt)


def _options(settings: CompactionSettings, name: str) -> dict[str, Any]:
    sub = getattr(settings, name, None)
    return sub.model_dump() if isinstance(sub, BaseModel) else {}


def _measure(counter: TokenCounter):
    return lambda raw: counter.estimate(raw + REPLY_PRIMING)


def _positive_int(value: Any) -> int | None:
    ok = isinstance(value, int) and not isinstance(value, bool) and value > 0
    return value if ok else None
