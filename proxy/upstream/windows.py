"""Each model's real context window: from config, else discovered from the upstream and cached."""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from typing import Any

import httpx

from proxy.settings import Upstream
from proxy.upstream import send as up

log = logging.getLogger("ctxproxy.windows")

# A failed discovery is retried sooner than a successful one is refreshed.
RETRY_AFTER_FAILURE = 30.0
# Model names come from clients: however many they invent, the cache holds this many windows.
MAX_CACHED = 256


class Windows:
    def __init__(self, client: httpx.AsyncClient, max_cached: int = MAX_CACHED):
        self.client = client
        self.max_cached = max_cached
        self._cache: OrderedDict[tuple[str, str], tuple[int | None, float]] = OrderedDict()

    async def window(self, upstream: Upstream, model: str) -> int | None:
        if upstream.context_window:
            return upstream.context_window
        # llama.cpp serves one model whatever the name says: one window per server.
        key = (upstream.name, "" if upstream.kind == "llamacpp" else model)
        cached = self._cache.get(key)
        if cached and cached[1] > time.monotonic():
            self._cache.move_to_end(key)
            return cached[0]
        try:
            found = await discover(self.client, upstream, model)
        except Exception as exc:  # discovery is best effort: fall back to config, never crash
            log.warning("window discovery for %s/%s failed: %s", upstream.name, model, exc)
            found = None
        ttl = upstream.discovery_ttl if found else RETRY_AFTER_FAILURE
        self._cache[key] = (found, time.monotonic() + ttl)
        self._cache.move_to_end(key)
        while len(self._cache) > self.max_cached:
            self._cache.popitem(last=False)  # the least recently used
        return found

    def __len__(self) -> int:
        return len(self._cache)


async def discover(client: httpx.AsyncClient, upstream: Upstream, model: str) -> int | None:
    if upstream.kind == "llamacpp":
        props = await _get_json(client, upstream, up.server_root(upstream) + "/props")
        return _positive(props.get("default_generation_settings", {}).get("n_ctx"))
    if upstream.kind == "vllm":
        listed = await _get_json(client, upstream, upstream.base_url + "/models")
        models = [m for m in listed.get("data", []) if isinstance(m, dict)]
        match = next((m for m in models if m.get("id") == model), models[0] if models else {})
        return _positive(match.get("max_model_len"))
    if upstream.kind == "ollama":
        r = await client.post(
            up.server_root(upstream) + "/api/show",
            json={"model": model},
            headers=up.request_headers(upstream),
            timeout=5.0,
        )
        r.raise_for_status()
        info = r.json().get("model_info") or {}
        arch = info.get("general.architecture", "")
        return _positive(info.get(f"{arch}.context_length"))
    return None


async def _get_json(client: httpx.AsyncClient, upstream: Upstream, url: str) -> dict[str, Any]:
    r = await client.get(url, headers=up.request_headers(upstream), timeout=5.0)
    r.raise_for_status()
    data = r.json()
    return data if isinstance(data, dict) else {}


def _positive(value: Any) -> int | None:
    return value if isinstance(value, int) and value > 0 else None
