"""Server-Timing: where one exchange's time went before its answer's head was sent."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

# In the order they happen; `upstream` is the wait for the upstream's response head (every
# attempt), `answer` the reading of a whole (non-streamed) answer and its recall rounds.
SPANS = ("store", "compile", "upstream", "answer")


class Timing:
    """Milliseconds per span of one exchange, summed over the times each span ran."""

    def __init__(self, started: float) -> None:
        self.started = started
        self.spans: dict[str, float] = {}

    @contextmanager
    def span(self, name: str) -> Iterator[None]:
        begun = time.monotonic()
        try:
            yield
        finally:
            self.spans[name] = self.spans.get(name, 0.0) + time.monotonic() - begun

    def header(self) -> str:
        """The header's value now: each span, `proxy` (ctxproxy's own time: the total less
        the time spent waiting on the upstream) and `total` (to this answer's head)."""
        total = time.monotonic() - self.started
        waited = self.spans.get("upstream", 0.0) + self.spans.get("answer", 0.0)
        spans = [(name, self.spans[name]) for name in SPANS if name in self.spans]
        parts = [f"{name};dur={seconds * 1000:.1f}" for name, seconds in spans]
        parts.append(f"proxy;dur={max(total - waited, 0.0) * 1000:.1f}")
        parts.append(f"total;dur={total * 1000:.1f}")
        return ", ".join(parts)
