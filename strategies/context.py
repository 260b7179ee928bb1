"""What a strategy may know (the Context), the pressure levels, and its errors."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Protocol, TypeVar

from strategies.events import CompactionEvent
from strategies.lineage import Lineage
from strategies.messages import Message
from strategies.options import KEEP_RECENT, StrategyOptions

Opts = TypeVar("Opts", bound=StrategyOptions)

# Pressure levels. The pipeline raises the level while the view stays over the target (up to
# ALL_PHASES), then, from NO_KEEP_WINDOW on, only while it stays over the budget.
ALL_PHASES = 1  # every phase of every strategy may run
NO_KEEP_WINDOW = 2  # the keep window shrinks to the latest turn; the working set may fold
FORGET_ANY = 3  # the working set and the user's messages may be forgotten too
LAST_RESORT = 4  # the latest turn's outputs, the task and the latest user message are cut


@dataclass(frozen=True)
class Context:
    """What a strategy may know: token figures, how to count, its own options.

    `count` gives one message's raw token count (cached by the caller); `measure` turns a raw
    sum into the estimate the budget is written in (reply priming, calibration).
    """

    budget: int
    target: int
    count: Callable[[Message], int]
    measure: Callable[[int], int] = lambda raw: raw
    options: StrategyOptions | None = None  # the running strategy's own
    # One of the levels below, raised by the pipeline only while the view stays over its goal.
    pressure: int = 0
    lineage: Lineage | None = None
    fixed: int = 0  # tokens of the fixed part (prompts, task) within the budget

    def room(self) -> int:
        """The part of the budget that compaction can change: the budget less the fixed part."""
        return max(self.budget - self.fixed, 0)

    def usage(self, messages: Iterable[Message]) -> int:
        return self.measure(sum(self.count(m) for m in messages))

    def opts(self, kind: type[Opts]) -> Opts:
        """The running strategy's options, or `kind`'s defaults when it was given none."""
        return self.options if isinstance(self.options, kind) else kind()

    def keep_recent(self) -> int:
        keep = getattr(self.options, "keep_recent", KEEP_RECENT)
        return 0 if self.pressure >= NO_KEEP_WINDOW else keep


StrategyResult = tuple[list[Message], list[CompactionEvent]]


class Strategy(Protocol):
    def __call__(self, messages: list[Message], ctx: Context) -> StrategyResult: ...


class OverBudget(Exception):
    """Even the smallest form the pipeline can make does not fit the budget.

    `largest` names the biggest message left in that form: (position in the history, role,
    tokens), so the client can be told what to shorten."""

    def __init__(self, needed: int, budget: int, largest: tuple[int, str, int] | None = None):
        super().__init__(f"needs {needed} tokens, budget {budget}")
        self.needed, self.budget, self.largest = needed, budget, largest


class InvariantError(AssertionError):
    """Compaction produced an invalid request: a bug in a strategy, never the client's fault."""
