"""The text caches hold at most their byte budget, whatever the texts' sizes."""

from __future__ import annotations

from strategies.budget import CacheBudget
from strategies.memo import text_cache


def test_bounded_by_bytes_and_still_answers() -> None:
    calls: list[str] = []
    budget = CacheBudget(100_000)

    @text_cache(budget)
    def upper(text: str) -> str:
        calls.append(text)
        return text.upper()

    texts = [f"{i} " + "x" * 2_000 for i in range(200)]  # ~800 KB through a 100 KB budget
    assert [upper(t) for t in texts] == [t.upper() for t in texts]
    assert budget.used <= 100_000
    assert 0 < len(upper.held) < 200  # type: ignore[attr-defined]
    calls.clear()
    assert upper(texts[-1]) == texts[-1].upper() and calls == []  # the newest is kept
    huge = "y" * 20_000  # over an eighth of the budget: computed, never kept
    assert upper(huge) == huge.upper() and upper(huge) == huge.upper()
    assert calls == [huge, huge]


def test_caches_share_one_budget_least_recently_used_out_first() -> None:
    budget = CacheBudget(200_000)

    @text_cache(budget)
    def upper(text: str) -> str:
        return text.upper()

    @text_cache(budget)
    def lower(text: str) -> str:
        return text.lower()

    kept = "K" * 5_000
    upper(kept)
    for i in range(60):  # each entry is ~10 KB: the budget holds about twenty
        lower(f"{i} " + "Z" * 5_000)
        upper(kept)  # used every time: it stays
    assert budget.used <= 200_000
    assert (kept,) in upper.held  # type: ignore[attr-defined]
    shares = budget.report()["caches"]
    assert shares["test_memo.upper"]["entries"] == 1
    assert 1 <= shares["test_memo.lower"]["entries"] < 60
    assert sum(s["bytes"] for s in shares.values()) == budget.used
    budget.resize(0)  # a smaller budget evicts at once
    assert budget.used == 0 and len(upper.held) == 0  # type: ignore[attr-defined]
