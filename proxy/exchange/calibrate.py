"""Per-model correction of tiktoken estimates, learned from what the upstream reports."""

from __future__ import annotations

import logging
from collections import OrderedDict
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


class Calibration:
    """factor(model) ≈ real prompt tokens / tiktoken estimate, for sessions that have none yet.

    A session carries its own factor in its stored state (the same after a restart or on
    another replica); this process-wide one only seeds new sessions. Keyed by upstream route
    and model, at most `size` of them (the least recently seen go first)."""

    def __init__(self, size: int = 256):
        self.size = size
        self._factors: OrderedDict[tuple[str, str], float] = OrderedDict()

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
