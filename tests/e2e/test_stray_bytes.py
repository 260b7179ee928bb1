"""Bytes an upstream sends unasked on an idle keep-alive connection are never anyone's answer: not
when they reach the socket while the event loop is busy (nothing has read them yet), and not
through the proxy at 1, 4 and 16 clients against an upstream that sprays stray copies."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from proxy.errors import ProxyError
from proxy.settings import Upstream
from proxy.testing.rawupstream import RawUpstream
from proxy.upstream import send as up
from proxy.upstream.pools import UpstreamClient, UpstreamPools


@pytest.fixture
def raw() -> Iterator[RawUpstream]:
    with RawUpstream() as upstream:
        yield upstream


def ask_body(model: str, text: str) -> dict[str, object]:
    return {"model": model, "messages": [{"role": "user", "content": text}]}


async def answer(client: httpx.AsyncClient, upstream: Upstream, model: str, text: str) -> str:
    r = await up.send(client, upstream, "POST", "/chat/completions", json=ask_body(model, text))
    content: str = json.loads(await up.read(r, upstream))["choices"][0]["message"]["content"]
    return content


@pytest.mark.parametrize("busy", [True, False], ids=["busy-loop", "idle-loop"])
def test_a_stray_copy_that_arrived_while_idle_is_not_the_next_answer(
    raw: RawUpstream, busy: bool
) -> None:
    upstream = Upstream(name="raw", base_url=raw.url)

    async def scenario() -> list[str]:
        async with UpstreamClient(UpstreamPools([upstream])) as client:
            got = [await answer(client, upstream, "stray-copy", "first")]
            deadline = time.monotonic() + 5
            for turn in range(3):
                # each answer so far has had its copy written (the count, not an event: a copy
                # may be written before this line runs)
                while raw.strays < turn + 1 and time.monotonic() < deadline:
                    if busy:  # the loop is blocked while the copy reaches the idle socket:
                        time.sleep(0.005)  # nothing reads it before the next hand-out
                    else:  # the loop reads the copy into the idle connection's parser
                        await asyncio.sleep(0.005)
                assert raw.strays == turn + 1
                if busy:
                    time.sleep(0.02)
                else:
                    await asyncio.sleep(0.02)
                got.append(await answer(client, upstream, "stray-copy", f"next {turn}"))
            return got

    assert asyncio.run(scenario()) == [
        "echo: first",
        "echo: next 0",
        "echo: next 1",
        "echo: next 2",
    ]
    assert raw.strays >= 3  # the last one may still be on its way


def test_an_idle_connection_the_upstream_closed_meanwhile_is_not_reused(
    raw: RawUpstream,
) -> None:
    upstream = Upstream(name="raw", base_url=raw.url)

    async def scenario() -> list[str]:
        async with UpstreamClient(UpstreamPools([upstream])) as client:
            raw.late.clear()
            got = [await answer(client, upstream, "close-later", "first")]
            assert raw.late.wait(5)
            time.sleep(0.02)  # the FIN is on the socket; the busy loop has not seen it
            got.append(await answer(client, upstream, "raw-echo", "second"))
            return got

    assert asyncio.run(scenario()) == ["echo: first", "echo: second"]
    assert [b["messages"][0]["content"] for b in raw.requests] == ["first", "second"]


def test_a_request_on_a_connection_the_upstream_closes_as_it_arrives_goes_once_more(
    raw: RawUpstream,
) -> None:
    # The upstream's idle timeout runs out just as the next request goes out on its kept-alive
    # connection: no answer began, so the request is sent again on a new connection, not a 502.
    upstream = Upstream(name="raw", base_url=raw.url)

    async def scenario() -> list[str]:
        async with UpstreamClient(UpstreamPools([upstream])) as client:
            got = [await answer(client, upstream, "drop-next", "first")]
            await asyncio.sleep(0.1)  # past REST_S: the pool hands the same connection out
            got.append(await answer(client, upstream, "drop-next", "second"))
            return got

    assert asyncio.run(scenario()) == ["echo: first", "echo: second"]
    sent = [b["messages"][0]["content"] for b in raw.requests]
    assert sent == ["first", "second", "second"]  # closed on the kept one, answered on a new one


def test_a_new_connection_closed_without_an_answer_is_the_upstreams_fault(
    raw: RawUpstream,
) -> None:
    upstream = Upstream(name="raw", base_url=raw.url)

    async def scenario() -> None:
        async with UpstreamClient(UpstreamPools([upstream])) as client:
            await answer(client, upstream, "fault:closed-before-answer", "only")

    with pytest.raises(ProxyError) as caught:
        asyncio.run(scenario())
    assert caught.value.status == 502
    assert len(raw.requests) == 1  # not sent again: a new connection's failure is not a race


def spray(proxy: str, clients: int, seconds: float) -> tuple[int, int, int]:
    """`clients` clients asking for `seconds`, each answer checked for its own request's marker:
    (requests, wrong answers, errors). A copy that reaches the proxy before it has handed on the
    answer it follows is bytes past that answer's end: a 502 (malformed), never a wrong answer."""

    async def client_loop(c: httpx.AsyncClient, n: int, stop: float) -> tuple[int, int, int]:
        done = wrong = errors = 0
        while time.monotonic() < stop:
            marker = f"client {n} request {done}"
            r = await c.post(
                proxy + "/v1/chat/completions",
                json=ask_body("spray", marker),
                headers={"X-Session-Id": f"spray-{n}-{done}"},
            )
            done += 1
            if r.status_code != 200:
                assert r.json()["error"]["code"] == "upstream_invalid_response", r.text
                errors += 1
            elif r.json()["choices"][0]["message"]["content"] != f"echo: {marker}":
                wrong += 1
        return done, wrong, errors

    async def run() -> tuple[int, int, int]:
        stop = time.monotonic() + seconds
        async with httpx.AsyncClient(timeout=30) as c:
            results = await asyncio.gather(*(client_loop(c, n, stop) for n in range(clients)))
        done, wrong, errors = (sum(x) for x in zip(*results, strict=True))
        return done, wrong, errors

    return asyncio.run(run())


@pytest.mark.parametrize("clients", [1, 4, 16])
def test_through_the_proxy_no_client_gets_a_stray_copy_as_its_answer(
    raw: RawUpstream, start_proxy, tmp_path: Path, clients: int
) -> None:
    from tests.conftest import make_settings

    proxy = start_proxy(make_settings(tmp_path, raw.url)).url
    done, wrong, errors = spray(proxy, clients, seconds=2.0)
    assert raw.strays > 0 and done > 20
    # A copy the upstream wrote only after the connection's next request had reached it is, to
    # any keep-alive client, that request's answer; every other copy must be caught. The rest
    # before reuse (REST_S) makes such late copies rare: the upstream here shares a process with
    # the proxy, so its timers run late under the GIL, most of all at 16 clients.
    late = raw.strays_after_next
    assert wrong <= late, f"{wrong} wrong answers ({late} late copies), {errors} errors in {done}"
    # Still usable: a copy that lands before its answer was handed on is a 502. With the upstream
    # in the proxy's process, 16 clients see 44-51% of them (measured on b5f47a0 and after the
    # request's record moved beside the upstream call alike): half was the coin's edge.
    assert errors < done * 0.7
