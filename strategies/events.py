"""What a compaction pass did, as the audit records it."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class CompactionEvent:
    strategy: str
    phase: int | None
    iterations: list[int]
    tokens_before: int
    tokens_after: int
    chars_removed: int
    reason: str
    # True for the passes of earlier turns that this view carries over; False for what fired now.
    replayed: bool = False
    passes: int = 1  # how many firings a carried-over event stands for

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @property
    def label(self) -> str:
        return self.strategy if self.phase is None else f"{self.strategy}:{self.phase}"
