"""The prompt cache as the model server saw it: the prefix of a view ctxproxy expects the
server to reuse (its common prefix with the branch's previous view), what the server reported
cached, and why a turn got less: a firing changed the view, the client changed its own
history, or the server evicted what it had."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from proxy.compile.tokens import TokenCounter
from proxy.compile.view import Compiled
from proxy.store.states import Prior
from strategies.state import Item, ViewState

FIRING, CLIENT, EVICTED = "firing", "client", "evicted"
SLACK_SHARE, SLACK_TOKENS = 0.1, 16  # estimates against the server's own count


@dataclass(frozen=True)
class Expectation:
    """What this exchange's view should find cached, against the branch's previous view."""

    expected: int  # tokens of the view's common prefix with the previous view (tools first)
    previous: int  # tokens of the previous view: what an unchanged view would reuse
    client: bool  # the history does not continue the previous view's: the client changed it

    def cause(self, cached: int | None, observed: bool) -> tuple[str | None, int]:
        """Why the turn got less than an unchanged view would have (None when it did not),
        and how many tokens that lost. Observed, the server saw the client's request: the
        would-be view is judged by what was expected of it."""
        got = self.expected if observed else cached
        if got is None:
            return None, 0
        lost = max(0, self.previous - got)
        if lost <= max(SLACK_TOKENS, SLACK_SHARE * self.previous):
            return None, 0
        if self.client:
            return CLIENT, lost
        if self.expected + max(SLACK_TOKENS, SLACK_SHARE * self.previous) < self.previous:
            return FIRING, lost
        return EVICTED, lost


def expect(
    prior: Prior | None,
    compiled: Compiled,
    counter: TokenCounter,
    messages: list[Any],
    observed: bool = False,
) -> Expectation | None:
    """None where nothing is known of an earlier view (a new session, an unknown window).
    Observed, the server counted the client's prompt, not the view: estimates it is."""
    state = compiled.state
    if state is None:
        return None
    if prior is None:
        if not any(m.get("role") == "assistant" for m in messages if isinstance(m, dict)):
            return None  # a new session
        return Expectation(0, 0, True)  # earlier turns, but no view of them on this branch
    old = prior.state
    previous = counter.estimate(old.view_tokens) + compiled.tools
    if _offers_recall(old) != _offers_recall(state):
        shared = 0  # the recall tool came or went: the tools, first in the prompt, changed
    else:
        k = _common(old.items, state.items)
        raw = old.view_tokens if k == len(old.items) else _counted(compiled, counter, k)
        shared = counter.estimate(raw) + compiled.tools
    later = messages[old.covered :]
    answers = sum(1 for m in later if isinstance(m, dict) and m.get("role") == "assistant")
    counted = None if observed else prior.prompt_tokens
    if isinstance(counted, int) and counted > 0 and previous > 0:
        # In the server's own tokens where it counted the previous prompt: that is what it
        # holds cached, and what its cached_tokens will be compared with.
        shared, previous = round(shared * counted / previous), counted
    return Expectation(min(shared, previous), previous, answers > 1)


def _counted(compiled: Compiled, counter: TokenCounter, k: int) -> int:
    return sum(counter.count_message(m) for m in compiled.messages[:k])


def _common(old: tuple[Item, ...], new: tuple[Item, ...]) -> int:
    """How many leading items the two views share: the same raw message, or the same form."""
    if new[: len(old)] == old:  # a turn that only appended: compared at C speed
        return len(old)
    k = 0
    for a, b in zip(old, new, strict=False):
        if a != b:
            break
        k += 1
    return k


def _offers_recall(state: ViewState) -> bool:
    return bool(state.forgotten) or bool(state.forms)


def cached_tokens(usage: dict[str, Any] | None, timings: Any = None) -> int | None:
    """The prompt tokens the server reports it reused: OpenAI's (and vLLM's, and ctxproxy's
    translation of Anthropic's cache_read_input_tokens) usage details, else llama.cpp's
    timings.cache_n."""
    details = usage.get("prompt_tokens_details") if isinstance(usage, dict) else None
    found = details.get("cached_tokens") if isinstance(details, dict) else None
    if _count(found) is None and isinstance(timings, dict):
        found = timings.get("cache_n")
    return _count(found)


def _count(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) and v >= 0 else None
