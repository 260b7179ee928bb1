"""The seam between the route and the strategies: budget from the window, view from the pipeline."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel

from proxy.compile.tokens import REPLY_PRIMING, TokenCounter
from proxy.errors import ContextLengthExceeded
from proxy.recall import tool as recall
from proxy.settings import CompactionSettings
from strategies import CompactionEvent, OverBudget, Plan, compile_view
from strategies.messages import Message
from strategies.options import OPTIONS, StrategyOptions
from strategies.state import ViewState

# Tokens a step leaves free under the budget when the recall tool may be offered, so that a
# recalled excerpt fits (rounds.USEFUL_ROOM, plus the call's wrapping, is less).
RECALL_ROOM = 256
TAIL_COUNTS = 16  # messages from a history's end whose counts are looked up first


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
    tools: int = 0  # the tool definitions' estimate, outside `budget` and inside the counts
    reserve: int = 0  # tokens kept for the answer

    @property
    def prompt_budget(self) -> int | None:
        """What the whole prompt may take, tools included: the basis of tokens_compiled, so
        the two add up wherever they are shown (headers, audit, viewer, access log)."""
        return None if self.budget is None else self.budget + self.tools

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
    fixed: int = 0,
) -> Compiled:
    """Compile the view of `body`'s messages; `prior` is the session branch's stored state for
    a prefix of them (None for a new session: the history is compiled as one arrival).
    `fixed`: tokens the prompt carries besides `body` (a replayed transcript's system prompt
    and tools, which the file lacks), taking their room as tool definitions do."""
    messages = list(body.get("messages") or [])
    count = _history_counter(body.get("messages") or [], counter)
    tools_raw = counter.count_tools(body.get("tools") or None)
    factor = counter.correction
    if window is None:
        raw = sum(count(m) for m in messages) + REPLY_PRIMING + tools_raw
        original = counter.estimate(raw)
        return Compiled(messages, original, original, None, None, [], None, factor, raw)
    tools_tokens = counter.estimate(tools_raw) + fixed
    reserve = answer_reserve(body, window, settings)
    budget = message_budget(body, window, settings, tools_tokens)
    recalls = any(recall.is_recall_tool(t) for t in body.get("tools") or [])
    plan = make_plan(settings, budget, RECALL_ROOM if recalls else 0)
    try:
        try:
            result = compile_view(messages, plan, count, _measure(counter), prior=prior)
        except OverBudget:
            if prior is None:
                raise
            # What the stored view holds (a marker, forms) cannot shrink enough: a fresh
            # compile of the whole history may still fit, and a refusal would lose the turn.
            result = compile_view(messages, plan, count, _measure(counter))
    except OverBudget as exc:
        raise _refusal(exc, messages, counter, tools_tokens, budget, window, reserve) from exc
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
        tools_tokens,
        reserve,
    )


def asked_tokens(body: dict) -> int | None:
    """The answer's length the client asked for, if any."""
    asked = _positive_int(body.get("max_completion_tokens"))
    return asked or _positive_int(body.get("max_tokens"))


def answer_reserve(body: dict, window: int, settings: CompactionSettings) -> int:
    """Tokens kept for the answer: what the client asked (else reserve_tokens), but at most
    an eighth of the window (or reserve_tokens, if more) and never half of it. Agents ask
    32,000 of any model they do not know; reserving all of it would leave the prompt no room,
    and the limit forwarded is raised again to what the compiled prompt leaves (answer_limit)."""
    share = max(window // 8, settings.reserve_tokens)
    return min(asked_tokens(body) or settings.reserve_tokens, share, window // 2)


def safety_margin(window: int, settings: CompactionSettings) -> int:
    return math.ceil(settings.safety_margin * window)


def message_budget(body: dict, window: int, settings: CompactionSettings, tools: int) -> int:
    """window - answer reserve - safety margin - tool schemas: what messages may use."""
    reserve = answer_reserve(body, window, settings)
    return window - reserve - safety_margin(window, settings) - tools


def answer_limit(body: dict, compiled: Compiled, settings: CompactionSettings) -> int | None:
    """The answer length to forward when the client asked more than the window has left after
    the compiled prompt (vLLM refuses prompt + max_tokens > max_model_len; llama.cpp stops at
    the window's end anyway); None to forward the client's figure unchanged."""
    asked, window = asked_tokens(body), compiled.window
    if asked is None or window is None:
        return None
    left = window - safety_margin(window, settings) - compiled.tokens_compiled
    limit = max(left, compiled.reserve)
    return limit if limit < asked else None


def _refusal(
    exc: OverBudget,
    messages: list[dict],
    counter: TokenCounter,
    tools: int,
    budget: int,
    window: int,
    reserve: int,
) -> ContextLengthExceeded:
    """The refusal in the request's own terms: its fixed part (leading system and developer
    prompts, tool definitions) against what the window leaves for the prompt."""
    largest = None
    if exc.largest is not None:
        index, role, tokens = exc.largest
        largest = (index, role, counter.estimate(tokens))
    lead = 0
    for m in messages:
        if m.get("role") not in ("system", "developer"):
            break
        lead += counter.count_message(m)
    return ContextLengthExceeded(
        exc.needed + tools,
        budget + tools,
        window,
        largest,
        prompts=counter.estimate(lead),
        tools=tools,
        reserve=reserve,
    )


def make_plan(settings: CompactionSettings, budget: int, excerpt: int = 0) -> Plan:
    """Settings become plain options per strategy, so strategies never see settings. Trigger
    and target are shares; the pipeline applies them to the room left after the fixed part
    (prompts, task) and `excerpt`, the tokens kept free for a recalled excerpt."""
    budget = max(budget, 0)
    trigger = math.floor(settings.trigger * budget)
    target = min(math.floor(settings.target * budget), trigger)
    found = {name: _options(settings, name) for name in settings.pipeline}
    options = {name: o for name, o in found.items() if o is not None}
    return Plan(
        settings.pipeline, budget, target, trigger, options, excerpt=excerpt,
        headroom=settings.headroom,
    )  # fmt: skip


def _options(settings: CompactionSettings, name: str) -> StrategyOptions | None:
    """The strategy's typed options (names were checked when the settings were loaded)."""
    sub, kind = getattr(settings, name, None), OPTIONS.get(name)
    return kind(**sub.model_dump()) if isinstance(sub, BaseModel) and kind else None


def _history_counter(messages: list[Message], counter: TokenCounter) -> Callable[[Message], int]:
    """Raw counts of the history's messages, known ones from memory (TokenCounter.
    message_counts), by identity while `messages` holds them; any other message (a compacted
    form) is counted by content."""
    counts = counter.message_counts(messages)
    # The newest messages first: a turn that compacts nothing counts only those.
    known = dict(zip(map(id, messages[-TAIL_COUNTS:]), counts[-TAIL_COUNTS:], strict=True))
    whole = len(known) == len(messages)

    def count(msg: Message) -> int:
        nonlocal known, whole
        found = known.get(id(msg))
        if found is None and not whole:
            known = dict(zip(map(id, messages), counts, strict=True))
            whole, found = True, known.get(id(msg))
        return counter.count_message(msg) if found is None else found

    return count


def _measure(counter: TokenCounter):
    return lambda raw: counter.estimate(raw + REPLY_PRIMING)


def _positive_int(value: Any) -> int | None:
    ok = isinstance(value, int) and not isinstance(value, bool) and value > 0
    return value if ok else None


def compilation_headers(compiled: Compiled) -> dict[str, str]:
    """The figures on one basis: the whole prompt, tool definitions included."""
    budget = compiled.prompt_budget
    return {
        "x-ctxproxy-tokens-original": str(compiled.tokens_original),
        "x-ctxproxy-tokens-compiled": str(compiled.tokens_compiled),
        "x-ctxproxy-budget": "" if budget is None else str(budget),
        "x-ctxproxy-compaction": compiled.summary(),
    }


def limited(body: dict[str, Any], limit: int | None) -> dict[str, Any]:
    """`body` asking for at most `limit` answer tokens (a copy, where it asked for more)."""
    keys = ("max_tokens", "max_completion_tokens")
    over = [
        k for k in keys if limit is not None and isinstance(body.get(k), int) and body[k] > limit
    ]
    return {**body, **dict.fromkeys(over, limit)} if over else body
