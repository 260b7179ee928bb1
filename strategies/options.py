"""Each strategy's options, typed, with the one set of defaults (config.yaml's compaction.*)."""

from __future__ import annotations

from dataclasses import dataclass

KEEP_RECENT = 2  # iterations at the end of the view left as sent


@dataclass(frozen=True)
class TracebackOptions:
    keep_recent: int = KEEP_RECENT
    min_chars: int = 2000  # outputs shorter than this are left alone
    head_lines: int = 10
    tail_lines: int = 10


@dataclass(frozen=True)
class TieredOptions:
    keep_recent: int = KEEP_RECENT
    truncate_chars: int = 200
    user_min_chars: int = 2000  # old user messages longer than this fold


@dataclass(frozen=True)
class ForgetOptions:
    keep_recent: int = KEEP_RECENT
    keep_first: float = 0.2  # of the room: the first steps after the task, never forgotten
    ledger_share: float = 0.4  # of the room, for the user's words from forgotten turns


@dataclass(frozen=True)
class FoldOptions:
    keep_recent: int = KEEP_RECENT
    min_chars: int = 1000


@dataclass(frozen=True)
class SlidingWindowOptions:
    keep_recent: int = KEEP_RECENT


StrategyOptions = (
    TracebackOptions | TieredOptions | ForgetOptions | FoldOptions | SlidingWindowOptions
)
OPTIONS: dict[str, type[StrategyOptions]] = {
    "traceback": TracebackOptions,
    "tiered": TieredOptions,
    "forget": ForgetOptions,
    "fold": FoldOptions,
    "sliding_window": SlidingWindowOptions,
}
