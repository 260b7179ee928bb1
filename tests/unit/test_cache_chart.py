"""The session chart's cache lines: what the server cached, what ctxproxy expected, the net
saving, and a mark on each turn that lost cache, coloured by its cause."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from proxy.store import ExchangeSummary
from proxy.ui import chart


def turn(seq: int, **cache: Any) -> ExchangeSummary:
    now = datetime.now(UTC)
    return ExchangeSummary(
        session_id="s",
        seq=seq,
        turn=seq,
        retry_of=None,
        created_at=now,
        finished_at=now,
        model="m",
        upstream="u",
        stream=False,
        pending=False,
        status=200,
        error_code=None,
        latency_ms=1.0,
        ttft_ms=None,
        tokens_original=1000 * seq,
        tokens_compiled=900,
        budget=1000,
        window=1200,
        pipeline=["fold"],
        phases=["fold"] if seq == 3 else [],
        new_messages=2,
        partial=False,
        prompt_tokens=900,
        completion_tokens=1,
        cached_tokens=cache.get("cached", 0),
        cache_expected=cache.get("expected"),
        cache_previous=cache.get("previous"),
        cache_cause=cache.get("cause"),
        cache_lost=cache.get("lost"),
    )


def test_the_chart_draws_the_cache_and_marks_the_turn_a_firing_cost() -> None:
    turns = [
        turn(1),
        turn(2, cached=880, expected=890, previous=890),
        turn(3, cached=100, expected=100, previous=1600, cause="firing", lost=1500),
        turn(4, cached=0, expected=900, previous=900, cause="evicted", lost=900),
    ]
    c = chart.build(turns)
    assert c is not None
    names = {s.name: s for s in c.series}
    assert {"cached", "expected", "net saved"} <= set(names)
    assert len(names["cached"].points.split()) == 4  # a cache miss (0) is a point too
    assert [(b.seq, b.cause) for b in c.breaks] == [(3, "firing"), (4, "evicted")]
    assert "1,500" in c.breaks[0].title
    # net per turn: 2: 1,100 saved; 3: 2,100 saved − 1,500 lost; 4: 3,100 (an eviction is
    # no firing's cost). SVG's y grows downwards.
    y = [float(p.split(",")[1]) for p in names["net saved"].points.split()]
    assert y[1] < y[2] > y[3]  # the firing's turn dips: its saving less what it lost
