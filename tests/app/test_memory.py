"""Memory: every cache within one budget shown in /stats, nothing of a request outlives it, and
a huge request is followed by memory given back."""

from __future__ import annotations

import gc
import time
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from proxy import sizes
from proxy.http import memory
from proxy.settings import Settings
from proxy.testing.scripted import Script
from proxy.testing.servers import ServerThread

LOCAL = "http://localhost"
MARK = "memory-test-marker "


def chat(proxy: ServerThread, messages: list[dict[str, Any]]) -> httpx.Response:
    body = {"model": "echo", "messages": messages}
    return httpx.post(proxy.url + "/v1/chat/completions", json=body, timeout=60)


def history(session: int, turns: int, chars: int = 3_000) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = [{"role": "user", "content": f"task {session}"}]
    for t in range(turns):
        call = {"id": f"c{t}", "type": "function", "function": {"name": "read", "arguments": "{}"}}
        messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        text = f"{MARK}{session}/{t} " + f"line {session} {t}\n" * (chars // 12)
        messages.append({"role": "tool", "tool_call_id": f"c{t}", "content": text})
    return messages


def stats(proxy: ServerThread) -> dict[str, Any]:
    r = httpx.get(proxy.url + "/stats", headers={"host": "localhost"})
    assert r.status_code == 200, r.text
    return r.json()["caches"]  # type: ignore[no-any-return]


def test_every_cache_shares_the_configured_budget(
    start_proxy: Callable[[Settings], ServerThread], settings_for: Callable[..., Settings]
) -> None:
    proxy = start_proxy(settings_for(cache_mb=1))
    for session in range(12):  # ~12 × 20 × 3 KB of tool output through a 1 MB budget
        for turns in (10, 20):
            assert chat(proxy, history(session, turns)).status_code == 200
    caches = stats(proxy)
    assert caches["budget_bytes"] == 1 << 20
    assert 0 < caches["used_bytes"] <= 1 << 20
    shares = caches["caches"]
    assert sum(c["bytes"] for c in shares.values()) == caches["used_bytes"]
    names = ("digest.hashed", "conversations.read", "conversations.lines", "tokens.histories")
    for name in (*names, "digest.seen"):
        assert shares[name]["bytes"] > 0, name


def test_nothing_of_a_request_outlives_it(
    start_proxy: Callable[[Settings], ServerThread],
    settings_for: Callable[..., Settings],
    script: Script,
) -> None:
    proxy = start_proxy(settings_for(cache_mb=0))  # no cache room: nothing may be kept
    for session in range(3):
        assert chat(proxy, history(session, 10)).status_code == 200
    time.sleep(0.2)
    script.reset()  # what the scripted upstream received
    gc.collect()
    alive = [
        o
        for o in gc.get_objects()
        if isinstance(o, list)
        and o
        and isinstance(o[-1], dict)
        and str(o[-1].get("content")).startswith(MARK)
    ]
    assert alive == []


def test_a_huge_request_is_followed_by_memory_given_back(
    start_proxy: Callable[[Settings], ServerThread],
    settings_for: Callable[..., Settings],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls: list[float] = []
    monkeypatch.setattr(memory, "give_back", lambda collect: calls.append(time.monotonic()))
    proxy = start_proxy(settings_for())
    assert chat(proxy, history(0, 4)).status_code == 200
    time.sleep(memory.DELAY_S + 0.5)
    assert calls == []  # an ordinary request: no trim
    huge = history(1, 2, chars=memory.TRIM_BYTES)
    assert chat(proxy, huge).status_code == 200
    done = time.monotonic()
    while not calls and time.monotonic() - done < 10:
        time.sleep(0.05)
    assert len(calls) == 1 and calls[0] - done >= memory.DELAY_S * 0.5


def test_ordinary_requests_are_followed_by_a_trim_now_and_then(
    start_proxy: Callable[[Settings], ServerThread],
    settings_for: Callable[..., Settings],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls: list[bool] = []
    monkeypatch.setattr(memory, "give_back", calls.append)
    monkeypatch.setattr(memory, "TRIM_EVERY", 100_000)
    proxy = start_proxy(settings_for())
    body = history(0, 10)  # ~30 KB a request
    for _ in range(10):
        assert chat(proxy, body).status_code == 200
    time.sleep(0.5)
    assert calls and len(calls) <= 3 and all(calls)  # collected, then trimmed


def test_a_request_too_large_to_be_a_working_set_fills_no_cache(
    start_proxy: Callable[[Settings], ServerThread],
    settings_for: Callable[..., Settings],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(sizes, "TRANSIENT_BYTES", 200_000)
    proxy = start_proxy(settings_for())
    assert chat(proxy, history(0, 4)).status_code == 200
    before = stats(proxy)["used_bytes"]
    assert chat(proxy, history(1, 4)).status_code == 200  # small: its entries are kept
    kept = stats(proxy)["used_bytes"]
    assert kept > before
    assert chat(proxy, history(2, 40, chars=6_000)).status_code == 200  # ~240 KB: none kept
    assert stats(proxy)["used_bytes"] == kept


def test_a_history_of_very_many_messages_fills_no_cache(
    start_proxy: Callable[[Settings], ServerThread],
    settings_for: Callable[..., Settings],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(sizes, "TRANSIENT_MESSAGES", 60)
    proxy = start_proxy(settings_for())
    assert chat(proxy, history(0, 4)).status_code == 200
    before = stats(proxy)["used_bytes"]
    assert chat(proxy, history(1, 4, chars=100)).status_code == 200  # 9 messages: kept
    kept = stats(proxy)["used_bytes"]
    assert kept > before
    many = history(2, 40, chars=100)  # 81 small messages (~20 KB): none kept
    assert chat(proxy, many).status_code == 200
    assert stats(proxy)["used_bytes"] == kept


def test_an_app_leaves_the_interpreter_as_it_found_it(
    settings_for: Callable[..., Settings],
) -> None:
    """create_app and its lifespan change no interpreter setting: that is `serve`'s choice
    (proxy/process.py), made before it serves."""
    import sys

    from fastapi.testclient import TestClient

    from proxy.app import create_app

    before = sys.getswitchinterval(), gc.get_threshold(), gc.get_freeze_count()
    with TestClient(create_app(settings_for()), base_url=LOCAL) as client:
        assert client.get("/healthz").status_code == 200
        assert (sys.getswitchinterval(), gc.get_threshold(), gc.get_freeze_count()) == before
