"""Per-model correction of tiktoken estimates, learned from what the upstream reports."""

from __future__ import annotations

from typing import Any

import httpx

from proxy import upstream as up
from proxy.settings import Upstream


class Calibration:
    """factor(model) ≈ real prompt tokens / tiktoken estimate, an exponential moving average."""

    def __init__(self, alpha: float = 0.5, bounds: tuple[float, float] = (0.5, 3.0)):
        self.alpha, self.bounds = alpha, bounds
        self._factors: dict[tuple[str, str], float] = {}

    def factor(self, upstream: str, model: str) -> float:
        return self._factors.get((upstream, model), 1.0)

    def observe(self, upstream: str, model: str, estimate: int, actual: Any) -> None:
        """`estimate` is the uncorrected tiktoken count of the prompt the upstream saw."""
        if not isinstance(actual, int) or actual <= 0 or estimate <= 0:
            return
        ratio = min(max(actual / estimate, self.bounds[0]), self.bounds[1])
        key = (upstream, model)
        prev = self._factors.get(key)
        self._factors[key] = ratio if prev is None else prev + self.alpha * (ratio - prev)


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
