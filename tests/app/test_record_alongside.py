"""The request's record is written while the view is on its way upstream, and the answer is
handed on only once that record is written: a failed record refuses the answer, a failed
upstream still leaves the request recorded and closed."""

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

SLOW_S = 0.4  # a record that takes this long to write


def _post(proxy: ServerThread, model: str, session: str, stream: bool = False) -> httpx.Response:
    body = {"model": model, "messages": [{"role": "user", "content": "hello there"}]}
    return httpx.post(
        proxy.url + "/v1/chat/completions",
        json={**body, "stream": stream},
        headers={"x-session-id": session},
        timeout=10,
    )


@pytest.mark.parametrize("stream", [False, True])
def test_the_upstream_works_while_the_record_is_written(
    start_proxy: Callable[[Settings], ServerThread],
    settings_for: Callable[..., Settings],
    script: Script,
    monkeypatch: pytest.MonkeyPatch,
    stream: bool,
) -> None:
    record = Store.record_request
    seen_by_upstream: list[int] = []

    def slow(self: Store, *args: Any, **kwargs: Any) -> Any:
        time.sleep(SLOW_S)
        seen_by_upstream.append(len(script.received))  # as the record is written
        return record(self, *args, **kwargs)

    monkeypatch.setattr(Store, "record_request", slow)
    proxy = start_proxy(settings_for())
    started = time.monotonic()
    r = _post(proxy, "echo", "along", stream)
    took = time.monotonic() - started
    assert r.status_code == 200 and "there" in r.text
    assert seen_by_upstream == [1]  # the upstream had the request before the record was done
    assert took >= SLOW_S  # and its answer waited for the record
    x = httpx.get(proxy.url + "/sessions/along/exchanges/1", timeout=10).json()
    assert x["exchange"]["status"] == 200
    assert x["request"]["messages"] == [{"role": "user", "content": "hello there"}]


def test_a_failed_record_refuses_the_answer(
    start_proxy: Callable[[Settings], ServerThread],
    settings_for: Callable[..., Settings],
    script: Script,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def broken(self: Store, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("disk full")

    monkeypatch.setattr(Store, "record_request", broken)
    proxy = start_proxy(settings_for())
    r = _post(proxy, "echo", "broken")
    assert r.status_code == 500
    assert "echo: hello there" not in r.text  # an answer is never relayed unrecorded
    assert r.json()["error"]["type"]


@pytest.mark.parametrize("model", ["fail-503", "gone"])
def test_a_failed_upstream_leaves_the_request_recorded_and_closed(
    start_proxy: Callable[[Settings], ServerThread],
    settings_for: Callable[..., Settings],
    script: Script,
    monkeypatch: pytest.MonkeyPatch,
    model: str,
) -> None:
    record = Store.record_request

    def slow(self: Store, *args: Any, **kwargs: Any) -> Any:
        time.sleep(SLOW_S)  # the upstream's failure comes back before the record is written
        return record(self, *args, **kwargs)

    monkeypatch.setattr(Store, "record_request", slow)
    settings = settings_for()
    if model == "gone":  # nothing listens there: the send fails at once
        dead = settings.upstreams[0].model_copy(
            update={"name": "gone", "models": ["gone"], "base_url": "http://127.0.0.1:9/v1"}
        )
        settings = settings.model_copy(update={"upstreams": [*settings.upstreams, dead]})
    proxy = start_proxy(settings)
    r = _post(proxy, model, f"failed-{model}")
    assert r.status_code in (502, 503)
    x = httpx.get(proxy.url + f"/sessions/failed-{model}/exchanges/1", timeout=10).json()
    assert x["exchange"]["pending"] is False
    assert x["exchange"]["status"] == r.status_code
    assert x["request"]["messages"] == [{"role": "user", "content": "hello there"}]
