"""Per-model correction of tiktoken estimates, learned from what the upstream reports."""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

import httpx

from proxy.settings import Upstream
from proxy.upstream import send as up

log = logging.getLogger("ctxproxy.calibration")


# Real tokenizers land within this of tiktoken's count for the same prompt; a usage figure
# outside it is a server that reports something else (or nothing real), and is ignored.
PLAUSIBLE = (0.67, 1.5)
ALPHA = 0.5


def plausible(estimate: int, actual: Any) -> float | None:
    """actual / estimate when both are usable and the ratio is believable, else None."""
    if not isinstance(actual, int) or isinstance(actual, bool) or actual <= 0 or estimate <= 0:
        return None
    ratio = actual / estimate
    if not PLAUSIBLE[0] <= ratio <= PLAUSIBLE[1]:
        log.warning(
            "calibration: ignoring usage.prompt_tokens=%d for an estimate of %d (ratio %.2f "
            "outside %.2f-%.2f)",
            actual,
            estimate,
            ratio,
            *PLAUSIBLE,
        )
        return None
    return ratio


def next_factor(factor: float, estimate: int, actual: Any) -> float:
    """A session's factor after the upstream counted `actual` for a prompt estimated (raw) at
    `estimate`: a moving average of believable ratios; implausible figures change nothing."""
    ratio = plausible(estimate, actual)
    return factor if ratio is None else factor + ALPHA * (ratio - factor)


# How long a session's next request waits for its previous answer to be recorded: an
# answer's record lands milliseconds after its last byte; this bounds a record that never
# comes (a crash between the two).
SETTLE_SECONDS = 5.0
OPEN_SESSIONS = 4096


class Calibration:
    """factor(model) ≈ real prompt tokens / tiktoken estimate, for sessions that have none yet.

    A session carries its own factor in its stored state (the same after a restart or on
    another replica); this process-wide one only seeds new sessions. Keyed by upstream route
    and model, at most `size` of them (the least recently seen go first).

    An answer moves its session's factor at one defined point: when the session's next request
    reads the stored state, which it does only once the answer is recorded (`settled`). A
    client that asks again the moment a stream ends would otherwise race the record, and the
    same session would compile to different views (estimated at 6,479 tokens one run, 6,552
    the next)."""

    def __init__(self, size: int = 256):
        self.size = size
        self._factors: OrderedDict[tuple[str, str], float] = OrderedDict()
        self._open: dict[str, Opened] = {}  # session -> an exchange not yet recorded

    def factor(self, upstream: str, model: str) -> float:
        return self._factors.get((upstream, model), 1.0)

    def observe(self, upstream: str, model: str, estimate: int, actual: Any) -> None:
        """`estimate` is the uncorrected tiktoken count of the prompt the upstream saw."""
        if plausible(estimate, actual) is None:
            return
        key = (upstream, model)
        prev = self._factors.pop(key, None)
        self._factors[key] = (
            actual / estimate if prev is None else next_factor(prev, estimate, actual)
        )
        while len(self._factors) > self.size:
            self._factors.popitem(last=False)

    def opened(self, session: str, length: int) -> Opened:
        """An exchange of `session` on `length` messages, its answer not recorded yet."""
        opened = self._open[session] = Opened(asyncio.Event(), length)
        while len(self._open) > OPEN_SESSIONS:  # exchanges that never closed (a crash)
            del self._open[next(iter(self._open))]
        return opened

    def closed(self, session: str, opened: Opened) -> None:
        opened.recorded.set()
        if self._open.get(session) is opened:
            del self._open[session]

    async def settled(self, session: str, length: int, seconds: float = SETTLE_SECONDS) -> None:
        """Once the session's previous answer (in this process) is recorded, when a request on
        `length` messages continues it (a parallel request on the same history waits for
        nothing)."""
        opened = self._open.get(session)
        if opened is None or length <= opened.length:
            return
        try:
            await asyncio.wait_for(opened.recorded.wait(), seconds)
        except TimeoutError:
            log.warning("session %s: previous answer not recorded after %ss", session, seconds)


@dataclass(frozen=True)
class Opened:
    recorded: asyncio.Event
    length: int  # messages of its request


async def exact_prompt_tokens(
    client: httpx.AsyncClient, upstream: Upstream, body: dict[str, Any]
) -> int | None:
    """The upstream's own count of a chat prompt, where the server can tell (llama.cpp, vLLM)."""
    root, headers = up.server_root(upstream), up.request_headers(upstream)
    fields = {k: body[k] for k in ("messages", "tools") if body.get(k)}
    if upstream.kind == "llamacpp":
        r = await client.post(root + "/apply-template", json=fields, headers=headers, timeout=30)
        r.raise_for_status()
        r = await client.post(
            root + "/tokenize", json={"content": r.json()["prompt"]}, headers=headers, timeout=30
        )
        r.raise_for_status()
        return len(r.json()["tokens"])
    if upstream.kind == "vllm":
        r = await client.post(
            root + "/tokenize", json={"model": body["model"], **fields}, headers=headers, timeout=30
        )
        r.raise_for_status()
        return int(r.json()["count"])
    return None
