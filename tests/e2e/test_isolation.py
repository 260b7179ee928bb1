"""One upstream cannot starve another: each server has its own connection pool, a request is
given up when its client leaves, and a whole answer has a deadline; errors name the upstream."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import httpx
import pytest

from proxy.testing.rawupstream import RawUpstream
from tests.e2e.test_faults import envelope, sse_event, until

HELLO = [{"role": "user", "content": "hi"}]


@pytest.fixture
def raw() -> Iterator[RawUpstream]:
    with RawUpstream() as upstream:
        yield upstream


def hung_and_healthy(raw: RawUpstream, upstream_url: str, **hung: object) -> list[dict]:
    return [
        {"name": "hung", "base_url": raw.url, "models": ["hang", "trickle", "comments"], **hung},
        {"name": "healthy", "base_url": upstream_url, "models": ["*"]},
    ]


def test_a_hung_upstream_does_not_starve_a_healthy_one(
    raw: RawUpstream, upstream_url: str, start_proxy, settings_for
) -> None:
    ups = hung_and_healthy(raw, upstream_url, max_connections=8, connect_timeout=1)
    proxy = start_proxy(settings_for(upstreams=ups))

    async def main() -> tuple[list[httpx.Response], int, httpx.Response, float]:
        async with httpx.AsyncClient(base_url=proxy.url, timeout=20) as c:
            body = {"model": "hang", "messages": HELLO}
            hung = [
                asyncio.create_task(c.post("/v1/chat/completions", json=body)) for _ in range(12)
            ]
            await asyncio.sleep(0.5)  # all 8 of its connections are taken, 4 wait for one
            started = time.monotonic()
            ok = await c.post("/v1/chat/completions", json={"model": "echo", "messages": HELLO})
            took = time.monotonic() - started
            done, pending = await asyncio.wait(hung, timeout=3)
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
            return [t.result() for t in done], len(pending), ok, took

    refused, still_hung, ok, took = asyncio.run(main())
    assert ok.status_code == 200 and took < 2, (ok.text, took)
    assert len(refused) == 4 and still_hung == 8
    for r in refused:  # the busy upstream is the one blamed, soon
        err = envelope(r, 504)
        assert "'hung'" in err["message"] and "busy" in err["message"]


def test_a_client_gone_from_a_non_streaming_request_frees_the_upstream(
    raw: RawUpstream, upstream_url: str, start_proxy, settings_for
) -> None:
    proxy = start_proxy(settings_for(upstreams=hung_and_healthy(raw, upstream_url)))
    body = {"model": "trickle", "messages": HELLO}
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(
            proxy.url + "/v1/chat/completions",
            json=body,
            headers={"X-Session-Id": "left"},
            timeout=1,
        )
    assert until(lambda: raw.connections == 0, timeout=3), "upstream still held"
    assert until(lambda: exchange_status(proxy.url, "left") == 499, timeout=3)


def exchange_status(url: str, sid: str) -> int | None:
    r = httpx.get(f"{url}/sessions/{sid}/exchanges/1", timeout=5)
    return r.json()["exchange"]["status"] if r.status_code == 200 else None


def test_a_trickling_answer_meets_the_total_deadline(
    raw: RawUpstream, upstream_url: str, start_proxy, settings_for
) -> None:
    ups = hung_and_healthy(raw, upstream_url, total_timeout=1.5)
    proxy = start_proxy(settings_for(upstreams=ups))
    started = time.monotonic()
    r = httpx.post(
        proxy.url + "/v1/chat/completions",
        json={"model": "trickle", "messages": HELLO},
        headers={"X-Session-Id": "slow"},
        timeout=10,
    )
    assert time.monotonic() - started < 4
    err = envelope(r, 504)
    assert "'hung'" in err["message"] and "total_timeout" in err["message"]
    assert until(lambda: raw.connections == 0, timeout=3)
    assert exchange_status(proxy.url, "slow") == 504


def test_endless_keepalive_comments_meet_the_total_deadline(
    raw: RawUpstream, upstream_url: str, start_proxy, settings_for
) -> None:
    ups = hung_and_healthy(raw, upstream_url, total_timeout=1.5)
    proxy = start_proxy(settings_for(upstreams=ups))
    started = time.monotonic()
    r = httpx.post(
        proxy.url + "/v1/chat/completions",
        json={"model": "comments", "messages": HELLO, "stream": True},
        headers={"X-Session-Id": "comments"},
        timeout=10,
    )
    assert time.monotonic() - started < 4 and r.status_code == 200
    events = [e for e in r.text.split("\n\n") if e.startswith("data:")]
    assert events[-1] == "data: [DONE]"
    assert sse_event(events[-2])["error"]["code"] == "upstream_timeout"
    assert until(lambda: raw.connections == 0, timeout=3)
    assert until(lambda: exchange_status(proxy.url, "comments") == 200, timeout=3)
