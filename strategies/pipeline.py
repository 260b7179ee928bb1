"""Run the configured strategies with hysteresis, on top of the session's stored decisions.

The view of a turn is the previous turn's view (its ViewState, as the store keeps it) with the
new messages appended. The pipeline fires only when that crosses the trigger, and then compacts
well below it, to the target, so the turns after it only append. Work per turn is proportional
to what is new; a firing costs a pass over the view.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping, Sequence
from itertools import compress, repeat
from typing import Any

from strategies import invariants
from strategies.context import ALL_PHASES, LAST_RESORT, NO_KEEP_WINDOW, Context, OverBudget
from strategies.cut import refit, use_room
from strategies.events import CompactionEvent
from strategies.fill import refill
from strategies.lineage import Lineage, memoize
from strategies.messages import PROMPT_ROLES, Message, canonical_json
from strategies.options import StrategyOptions
from strategies.registry import get
from strategies.state import ViewState
from strategies.tiered import fold_newest

# Light steps try to free these shares of the room (the budget less the fixed part) by
# folding the newest old outputs.
LIGHT_ROOMS = (0.25, 0.4)


@dataclasses.dataclass(frozen=True)
class Plan:
    pipeline: Sequence[str]
    budget: int
    target: int
    trigger: int
    options: Mapping[str, StrategyOptions] = dataclasses.field(default_factory=dict)
    fixed: int = 0  # tokens of the fixed part (prompts, task), once `within` has placed it
    # Tokens a step leaves free under the budget for one recalled excerpt (0: no recall).
    excerpt: int = 0
    # Share of the room a deep firing leaves free, so that a continuing session's next turns
    # append without firing again; the rest is filled back (strategies/fill.py). 1: no fill.
    headroom: float = 1.0

    def key(self) -> str:
        return canonical_json(
            [list(self.pipeline), self.budget, self.target, self.trigger, self._options(),
             self.headroom]
        )  # fmt: skip

    def _options(self) -> dict[str, dict[str, Any]]:
        return {name: dataclasses.asdict(o) for name, o in self.options.items()}

    def within(self, fixed: int) -> Plan:
        """Trigger and target as shares of the room left after `fixed` tokens (prompts, task)
        and the excerpt kept free, rather than of the whole budget: a client whose fixed part
        fills most of the window still sees rare, large steps."""
        if self.budget <= 0:
            return self
        room = max(self.budget - self.excerpt - fixed, 0)
        trigger = fixed + math.floor(room * self.trigger / self.budget)
        target = min(fixed + math.floor(room * self.target / self.budget), trigger)
        if self.headroom < 1:  # a headroom past the target's makes the firing go deeper
            fill = self.budget - self.excerpt - math.floor(self.headroom * room)
            target = min(target, max(fill, fixed))
        return dataclasses.replace(
            self, trigger=min(trigger, self.budget), target=target, fixed=fixed
        )

    def room(self) -> int:
        """What a step can make room in: the budget less the fixed part and the excerpt."""
        return max(self.budget - self.excerpt - self.fixed, 0)

    def fill_level(self) -> int:
        """Tokens a deep firing fills the view back up to: the budget less the excerpt's room
        and the headroom."""
        return self.budget - self.excerpt - math.floor(self.headroom * self.room())


@dataclasses.dataclass(frozen=True)
class Result:
    view: list[Message]
    events: list[CompactionEvent]  # carried over (replayed=True), then what fired now
    state: ViewState  # to store, and to hand back on the branch's next turn
    original_tokens: int  # raw count of the whole history


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
    prior: ViewState | None = None,
) -> Result:
    """The view to send, the compactions behind it and the state to keep; raises OverBudget
    or InvariantError. `prior` is the stored state of a prefix of `messages`, if any."""
    count = memoize(count)
    lineage = Lineage(messages)
    restored = prior is not None and prior.fits(messages)
    if prior is not None and restored:
        new = messages[prior.covered :]
        added = sum(count(m) for m in new)
        view = prior.restore(messages, lineage) + new
        view_raw, original_raw = prior.view_tokens + added, prior.original_tokens + added
        carried, fresh = list(prior.carried), bool(new)
    else:
        view, carried, fresh = list(messages), [], True
        view_raw = original_raw = sum(count(m) for m in messages)
    # A resent history keeps its view as long as it fits: same request, same bytes.
    events: list[CompactionEvent] = []
    # The trigger only rises with the fixed part: a view under it where that part is nothing
    # needs no pass over the history to place it.
    least = plan.within(0).trigger if plan.trigger <= plan.budget else 0
    if measure(view_raw) > (least if fresh else plan.budget):
        plan = plan.within(measure(fixed_tokens(messages, count)))
        if measure(view_raw) > (plan.trigger if fresh else plan.budget):
            ctx = Context(
                plan.budget, plan.target, count, measure, lineage=lineage, fixed=plan.fixed
            )
            view, events = _fire(view, plan, ctx)
            view_raw = sum(count(m) for m in view)
    refitted = False
    if prior is not None and restored and not events and _asks(messages[prior.covered :]):
        ctx = Context(plan.budget, plan.target, count, measure, lineage=lineage)
        again = refit(view, ctx, plan.budget - plan.excerpt)  # never larger than it stood
        if again is not view:  # a change to what was sent: recorded as a firing of its own
            before = view_raw
            view, view_raw, refitted = again, sum(count(m) for m in again), True
            events = [_refit_event(before, view_raw)]
    try:
        invariants.check(messages, view, budget=plan.budget, usage=measure(view_raw))
    except OverBudget as exc:
        exc.largest = _largest(view, lineage, count)
        raise
    kept = merge(carried + events)
    if prior is not None and restored and not events and not refitted:  # appended to
        state = prior.extended(len(messages), kept, view_raw, original_raw)
    else:
        state = ViewState.capture(len(messages), view, lineage, kept, view_raw, original_raw)
    return Result(view, merge(carried) + events, state, original_raw)


def _level(plan: Plan) -> int:
    """What the newest output's cut and a deep step's fill may bring the view up to."""
    return plan.fill_level() if plan.headroom < 1 else plan.budget - plan.excerpt


def _refit_event(before: int, after: int) -> CompactionEvent:
    return CompactionEvent(
        "cut",
        None,
        [],
        before,
        after,
        0,
        "the newest output's cut made again: the new user text names lines it had left out",
    )


def _asks(new: Sequence[Message]) -> bool:
    """Whether the new messages hold user text, which may name what a cut output holds."""
    return any(m.get("role") == "user" for m in new)


def fixed_tokens(messages: Sequence[Message], count: Callable[[Message], int]) -> int:
    """Raw tokens of what no step before the last resort changes: the system and developer
    prompts and the task (the first user message)."""
    roles = list(map(dict.get, messages, repeat("role")))  # at C speed: prompts are few
    fixed = set(compress(range(len(roles)), map(PROMPT_ROLES.__contains__, roles)))
    if "user" in roles:
        fixed.add(roles.index("user"))
    return sum(count(messages[i]) for i in fixed)


def merge(events: Sequence[CompactionEvent]) -> list[CompactionEvent]:
    """One event per pass for the compactions carried over from earlier turns, so a long
    session reports a handful of events per request, not one per firing it ever had."""
    by_label: dict[str, list[CompactionEvent]] = {}
    for e in events:
        by_label.setdefault(e.label, []).append(e)
    merged = []
    for group in by_label.values():
        passes = sum(e.passes for e in group)
        reason = group[0].reason.split("; carried over")[0]
        merged.append(
            CompactionEvent(
                group[0].strategy,
                group[0].phase,
                sorted({it for e in group for it in e.iterations}),
                group[0].tokens_before,
                group[-1].tokens_after,
                sum(e.chars_removed for e in group),
                f"{reason}; carried over from earlier turns ({passes} passes)",
                replayed=True,
                passes=passes,
            )
        )
    return merged


def _fire(
    view: list[Message], plan: Plan, ctx: Context
) -> tuple[list[Message], list[CompactionEvent]]:
    """The cheapest way down, for the model server's prefix cache: a light step that folds the
    newest old outputs (changes near the end of the view), or the full pipeline (changes near
    its start, but room for many turns), whichever loses fewer cached tokens per token of room
    it makes."""
    lineage = ctx.lineage
    assert lineage is not None
    forgotten = set(lineage.forgotten)
    options = []
    if "tiered" in plan.pipeline and ctx.usage(view) <= 1.5 * plan.budget:
        for room in LIGHT_ROOMS:
            goal = plan.budget - plan.excerpt - math.floor(room * plan.room())
            if goal > plan.target:
                step = dataclasses.replace(ctx, target=goal, options=plan.options.get("tiered"))
                options.append((*fold_newest(view, step), forgotten))
    lineage.forgotten = set(forgotten)
    options.append((*_deep(view, plan, ctx), set(lineage.forgotten)))
    # A step that leaves the excerpt's room if any does, else one that fits the budget.
    fitting = [o for o in options if ctx.usage(o[0]) <= plan.budget - plan.excerpt]
    fitting = fitting or [o for o in options if ctx.usage(o[0]) <= plan.budget] or options[-1:]
    best = min(fitting, key=lambda o: _cost(view, o[0], ctx, plan.budget))
    lineage.forgotten = best[2]
    # The newest output takes its room first (cut to fit, never forgotten whole), then a deep
    # step's room is filled back with what was forgotten, both up to the fill level.
    level = _level(plan)
    view = use_room(best[0], ctx, level)
    if best is options[-1] and plan.headroom < 1:
        view = refill(view, ctx, level)
    return view, best[1]


def _deep(
    view: list[Message], plan: Plan, ctx: Context
) -> tuple[list[Message], list[CompactionEvent]]:
    """The pipeline at increasing pressure, each level only while the view is over its goal.

    Below NO_KEEP_WINDOW the goal is the target, so a firing is a large step; the deeper levels
    (the keep window, the working set, what the next step needs) run only while the view is
    over the budget less the excerpt's room: the target is for growth, never worth what the
    next step reads; after them, forgetting older steps still goes down to the target."""
    events: list[CompactionEvent] = []
    if "forget" in plan.pipeline and ctx.usage(view) > 2 * plan.budget:
        # A long history arriving at once: forget down to the budget first, rather than fold
        # thousands of outputs only to forget most of them.
        step = dataclasses.replace(ctx, target=plan.budget, options=plan.options.get("forget"))
        view, events = get("forget")(view, step)
    deepest = 0
    for pressure in range(LAST_RESORT + 1):
        target = _goal(plan, pressure)
        if pressure and ctx.usage(view) <= target:
            break
        for name in plan.pipeline:
            step = dataclasses.replace(
                ctx, pressure=pressure, target=target, options=plan.options.get(name)
            )
            view, fired = get(name)(view, step)
            events += fired
        deepest = pressure
    if deepest >= NO_KEEP_WINDOW and "forget" in plan.pipeline and ctx.usage(view) > plan.target:
        # The deep levels stopped at the budget; forgetting older steps (the keep window kept,
        # now that its outputs were cut) still makes the large step that leaves room to grow.
        options = plan.options.get("forget")
        step = dataclasses.replace(ctx, pressure=ALL_PHASES, target=plan.target, options=options)
        view, fired = get("forget")(view, step)
        events += fired
    return view, events


def _goal(plan: Plan, pressure: int) -> int:
    """Below NO_KEEP_WINDOW the target; from there on the budget less the excerpt's room, so
    the latest steps stay whole while they fit and a recalled excerpt still fits."""
    return plan.target if pressure < NO_KEEP_WINDOW else plan.budget - plan.excerpt


def _cost(before: list[Message], after: list[Message], ctx: Context, budget: int) -> float:
    """Tokens the prefix cache loses (from the first changed message on) per token of room."""
    first = next(
        (i for i, (a, b) in enumerate(zip(before, after, strict=False)) if a is not b),
        min(len(before), len(after)),
    )
    lost = sum(ctx.count(m) for m in before[first:])
    return lost / max(budget - ctx.usage(after), 1)


def _largest(
    view: list[Message], lineage: Lineage, count: Callable[[Message], int]
) -> tuple[int, str, int] | None:
    if not view:
        return None
    m = max(view, key=count)
    return lineage.index(m), str(m.get("role")), count(m)
