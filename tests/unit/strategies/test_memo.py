"""The text caches hold at most their byte budget, whatever the texts' sizes."""

from __future__ import annotations

from strategies.memo import text_cache


def test_bounded_by_bytes_and_still_answers() -> None:
    calls: list[str] = []

    @text_cache(max_bytes=100_000)
    def upper(text: str) -> str:
        calls.append(text)
        return text.upper()

    texts = [f"{i} " + "x" * 2_000 for i in range(200)]  # ~800 KB through a 100 KB cache
    assert [upper(t) for t in texts] == [t.upper() for t in texts]
    held = upper.held  # type: ignore[attr-defined]
    assert sum(size for _, size in held.values()) <= 100_000
    assert 0 < len(held) < 200
    calls.clear()
    assert upper(texts[-1]) == texts[-1].upper() and calls == []  # the newest is kept
    huge = "y" * 60_000  # over a quarter of the budget: computed, never kept
    assert upper(huge) == huge.upper() and upper(huge) == huge.upper()
    assert calls == [huge, huge]
