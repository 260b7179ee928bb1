"""The answer's bytes go before its record is written, and the audit API still reads what the
client was answered."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from proxy.settings import Settings
from proxy.store import Store
from proxy.testing.scripted import Script
from proxy.testing.servers import ServerThread

SLOW_S = 1.5  # a store that takes this long to write a record


@pytest.fixture
def slow_finish(monkeypatch: pytest.MonkeyPatch) -> None:
    finish = Store.finish_exchange

    def slow(self: Store, *args: Any, **kwargs: Any) -> None:
        time.sleep(SLOW_S)
        finish(self, *args, **kwargs)

    monkeypatch.setattr(Store, "finish_exchange", slow)


@pytest.mark.parametrize("stream", [False, True])
def test_a_slow_record_delays_neither_the_answer_nor_what_the_audit_api_reads(
    start_proxy: Callable[[Settings], ServerThread],
    settings_for: Callable[..., Settings],
    script: Script,
    slow_finish: None,
    stream: bool,
) -> None:
    proxy = start_proxy(settings_for())
    body = {"model": "echo", "messages": [{"role": "user", "content": "hello there"}]}
    headers = {"x-session-id": "first"}
    started = time.monotonic()
    r = httpx.post(
        proxy.url + "/v1/chat/completions",
        json={**body, "stream": stream},
        headers=headers,
        timeout=10,
    )
    answered = time.monotonic() - started
    assert r.status_code == 200 and "hello" in r.text
    assert answered < SLOW_S * 0.8  # a stream's end included
    # Read at once, the record is the answer the client got, not a pending exchange.
    x = httpx.get(proxy.url + "/sessions/first/exchanges/1", timeout=10).json()
    assert x["exchange"]["status"] == 200
    assert x["response"]["content"].strip() == "echo: hello there"
