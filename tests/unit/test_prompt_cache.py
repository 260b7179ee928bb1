"""The prompt cache as the server saw it: what ctxproxy expects reusable from one view to the
next, and the cause it gives a turn that found less cached (proxy/exchange/cache.py)."""

from __future__ import annotations

from typing import Any

from proxy.compile.tokens import TokenCounter
from proxy.compile.view import Compiled
from proxy.exchange.cache import Expectation, cached_tokens, expect
from proxy.store.states import Prior
from strategies.state import Form, ViewState

COUNTER = TokenCounter()


def history(n: int) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = [{"role": "system", "content": "be brief"}]
    for i in range(n):
        out += [
            {"role": "user", "content": f"question {i} " + "words " * 50},
            {"role": "assistant", "content": f"answer {i} " + "more " * 50},
        ]
    return out


def compiled_of(messages: list[dict[str, Any]], items: tuple, view: list) -> Compiled:
    raw = sum(COUNTER.count_message(m) for m in view)
    state = ViewState(len(messages), items, view_tokens=raw, original_tokens=raw)
    return Compiled(view, raw, raw, 4000, 8000, [], state, 1.0, raw)


def prior_of(compiled: Compiled) -> Prior:
    assert compiled.state is not None
    return Prior(compiled.state, 1.0, compiled.raw_prompt, None, compiled.tokens_original)


def test_a_turn_that_only_appends_expects_the_whole_previous_view() -> None:
    old = history(3)
    before = compiled_of(old, tuple(range(len(old))), old)
    new = [*old, {"role": "user", "content": "and then?"}]
    now = compiled_of(new, tuple(range(len(new))), new)
    e = expect(prior_of(before), now, COUNTER, new)
    assert e is not None and e.expected == e.previous == before.tokens_compiled
    assert not e.client
    assert e.cause(e.previous + 5, observed=False) == (None, 0)
    # ... and when the server reports far less, it evicted what it had
    assert e.cause(10, observed=False) == ("evicted", e.previous - 10)


def test_a_firing_that_rewrites_the_prefix_is_the_cause() -> None:
    old = history(6)
    before = compiled_of(old, tuple(range(len(old))), old)
    new = [*old, {"role": "user", "content": "go on"}]
    marker = {"role": "user", "content": "[earlier turns folded]"}
    view = [new[0], marker, *new[5:]]
    items = (0, Form(1, "fold", marker, True), *range(5, len(new)))
    now = compiled_of(new, items, view)
    e = expect(prior_of(before), now, COUNTER, new)
    assert e is not None
    assert e.expected == 0  # the first fold brings the recall tool: the tools come first
    cause, lost = e.cause(e.expected, observed=False)
    assert cause == "firing" and lost == e.previous
    # Observed, the would-be view is judged by what was expected of it
    assert e.cause(None, observed=True) == ("firing", lost)
    # A later firing, the tool already offered: the view is shared up to its first change
    later = [*new, {"role": "assistant", "content": "ok"}, {"role": "user", "content": "more"}]
    marker2 = {"role": "user", "content": "[more turns folded]"}
    view2 = [later[0], marker2, *later[9:]]
    again = compiled_of(later, (0, Form(1, "fold", marker2, True), *range(9, len(later))), view2)
    e2 = expect(prior_of(now), again, COUNTER, later)
    assert e2 is not None and e2.expected == COUNTER.count_message(later[0])
    assert e2.cause(e2.expected, observed=False)[0] == "firing"


def test_a_client_that_rewrote_its_history_is_the_cause() -> None:
    old = history(2)
    before = compiled_of(old, tuple(range(len(old))), old)
    # The prior found covers an older turn only: two answers came since
    new = [*history(4), {"role": "user", "content": "next"}]
    now = compiled_of(new, tuple(range(len(new))), new)
    e = expect(prior_of(before), now, COUNTER, new)
    assert e is not None and e.client
    assert e.cause(0, observed=False)[0] == "client"
    # No view of this branch at all, yet the history carries earlier answers
    assert expect(None, now, COUNTER, new) == Expectation(0, 0, True)
    assert expect(None, now, COUNTER, [new[0], new[1]]) is None  # a new session


def test_cached_tokens_from_each_servers_report() -> None:
    assert cached_tokens({"prompt_tokens_details": {"cached_tokens": 7}}) == 7
    assert cached_tokens({"prompt_tokens": 9}, {"cache_n": 5, "prompt_n": 4}) == 5
    assert cached_tokens({"prompt_tokens": 9}) is None
    assert cached_tokens(None, {"cache_n": True}) is None


def test_the_expectation_is_in_the_servers_tokens_where_it_counted_the_last_prompt() -> None:
    old = history(3)
    before = compiled_of(old, tuple(range(len(old))), old)
    new = [*old, {"role": "user", "content": "and then?"}]
    now = compiled_of(new, tuple(range(len(new))), new)
    counted = Prior(before.state, 1.0, before.raw_prompt, 321, before.tokens_original)  # type: ignore[arg-type]
    e = expect(counted, now, COUNTER, new)
    assert e is not None and e.previous == e.expected == 321
    assert e.cause(321, observed=False) == (None, 0)  # all of it cached: nothing flagged
    # Observed, the server counted the client's own prompt: the view's estimate stands
    e = expect(counted, now, COUNTER, new, observed=True)
    assert e is not None and e.previous == before.tokens_compiled
