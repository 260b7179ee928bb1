"""Run the configured strategies with hysteresis, replaying the session turn by turn.

No session state exists yet, so stickiness comes from a pure rule: the history is replayed from
its first request point to its last, and the pipeline fires only where the view crossed the
trigger, compacting down to the target. Turn n+1 replays turn n exactly and then appends, so an
old message's compiled form changes only when a new compaction fires.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import Any

from strategies import invariants
from strategies.base import (
    CompactionEvent,
    Context,
    Lineage,
    Message,
    canonical_json,
    get,
    memoize,
)
from strategies.replay import REPLAYS, ReplayCache, State, prefix_keys


@dataclasses.dataclass(frozen=True)
class Plan:
    pipeline: Sequence[str]
    budget: int
    target: int
    trigger: int
    options: Mapping[str, Mapping[str, Any]] = dataclasses.field(default_factory=dict)

    def key(self) -> str:
        return canonical_json(
            [list(self.pipeline), self.budget, self.target, self.trigger, self.options]
        )


def request_points(messages: Sequence[Message]) -> list[int]:
    """Prefix lengths at which a client asked for a completion: before each assistant reply."""
    cuts = [
        i
        for i in range(1, len(messages))
        if messages[i].get("role") == "assistant" and messages[i - 1].get("role") != "assistant"
    ]
    return [*cuts, len(messages)]


def compile_view(
    messages: list[Message],
    plan: Plan,
    count: Callable[[Message], int],
    measure: Callable[[int], int],
    *,
    hashes: Sequence[str] | None = None,
    cache_key: Hashable | None = None,
    cache: ReplayCache = REPLAYS,
) -> tuple[list[Message], list[CompactionEvent]]:
    """The view to send and the compactions behind it; raises OverBudget or InvariantError.

    With `hashes` (message_hash of each message) and a `cache_key` naming everything else that
    shapes the result (counting, calibration), the replay resumes from a cached earlier turn.
    """
    count = memoize(count)
    lineage = Lineage(messages)
    ctx = Context(plan.budget, plan.target, count, measure, lineage=lineage)
    points = request_points(messages)
    keys = prefix_keys(hashes, points) if hashes is not None and cache_key is not None else []
    key = (plan.key(), cache_key)
    state = next((s for k in reversed(keys) if (s := cache.get((k, key)))), None)
    view = state.restore(messages, lineage) if state else []
    earlier = list(state.earlier) if state else []
    events = list(state.last) if state else []
    start = state.point if state else 0
    raw = sum(count(m) for m in view)
    for end in points:
        if end <= start:
            continue
        view += messages[start:end]
        raw += sum(count(m) for m in messages[start:end])
        start = end
        earlier += events
        events = []
        if measure(raw) > plan.trigger:
            view, events = _fire(view, plan, ctx)
            raw = sum(count(m) for m in view)
    if keys:
        cache.put((keys[-1], key), State.capture(points[-1], view, lineage, earlier, events))
    invariants.check(messages, view, budget=plan.budget, usage=measure(raw))
    return view, merge(earlier) + events


def merge(events: Sequence[CompactionEvent]) -> list[CompactionEvent]:
    """One event per pass for the compactions replayed from earlier turns, so a long session
    reports a handful of events per request, not one per turn it ever compacted."""
    by_label: dict[str, list[CompactionEvent]] = {}
    for e in events:
        by_label.setdefault(e.label, []).append(e)
    return [
        CompactionEvent(
            group[0].strategy,
            group[0].phase,
            sorted({it for e in group for it in e.iterations}),
            group[0].tokens_before,
            group[-1].tokens_after,
            sum(e.chars_removed for e in group),
            f"{group[0].reason}; replayed from earlier turns ({len(group)} passes)",
            replayed=True,
        )
        for group in by_label.values()
    ]


def _fire(
    view: list[Message], plan: Plan, ctx: Context
) -> tuple[list[Message], list[CompactionEvent]]:
    """The pipeline at increasing pressure, each level only while the view is over budget."""
    events: list[CompactionEvent] = []
    for pressure in (0, 1, 2, 3):
        if pressure and ctx.usage(view) <= plan.budget:
            break
        for name in plan.pipeline:
            step = dataclasses.replace(ctx, pressure=pressure, options=plan.options.get(name, {}))
            view, fired = get(name)(view, step)
            events += fired
    return view, events
