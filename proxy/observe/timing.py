"""Server-Timing: where one exchange's time went before its answer's head was sent."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

# In the order they happen; `upstream` is the wait for the upstream's response head (every
# attempt) less ctxproxy's own work meanwhile (the request's record), `answer` the reading of a
# whole (non-streamed) answer and its recall rounds.
SPANS = ("store", "compile", "upstream", "answer")


class Timing:
    """Milliseconds per span of one exchange, summed over the times each span ran."""

    def __init__(self, started: float) -> None:
        self.started = started
        self.spans: dict[str, float] = {}
        self.path: str | None = None  # the store's path for the exchange (store/paths.py)

    @contextmanager
    def span(self, name: str, within: str | None = None) -> Iterator[None]:
        """`within`: a span this one runs during (the request's record while the upstream
        works), which is then that much shorter: the time was ctxproxy's, not a wait."""
        begun = time.monotonic()
        try:
            yield
        finally:
            took = time.monotonic() - begun
            self.spans[name] = self.spans.get(name, 0.0) + took
            if within is not None:
                self.spans[within] = self.spans.get(within, 0.0) - took

    def header(self) -> str:
        """The header's value now: each span, `proxy` (ctxproxy's own time: the total less
        the time spent waiting on the upstream) and `total` (to this answer's head)."""
        total = time.monotonic() - self.started
        waited = max(self.spans.get("upstream", 0.0), 0.0) + self.spans.get("answer", 0.0)
        spans = [(name, max(self.spans[name], 0.0)) for name in SPANS if name in self.spans]
        parts = [f"{name};dur={seconds * 1000:.1f}" for name, seconds in spans]
        parts.append(f"proxy;dur={max(total - waited, 0.0) * 1000:.1f}")
        parts.append(f"total;dur={total * 1000:.1f}")
        if self.path is not None:
            parts.append(f'path;desc="{self.path}"')
        return ", ".join(parts)
