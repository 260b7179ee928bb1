"""One answer, one request: after any malformed or hostile upstream answer, the faulted request gets
a clean error (recorded with the status the client got) and the next requests, each in its own
session, get their own answers, never a leftover from the faulted connection."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from proxy.testing.rawfaults import FAULTS
from proxy.testing.rawupstream import RawUpstream
from tests.e2e.test_upstream_answers import record

FOLLOWERS = 10


@pytest.fixture(scope="module")
def raw() -> Iterator[RawUpstream]:
    with RawUpstream() as upstream:
        yield upstream


@pytest.fixture(scope="module")
def client() -> Iterator[httpx.Client]:
    with httpx.Client(timeout=10) as c:  # one client: no TLS context and no connection per call
        yield c


def chat(c: httpx.Client, url: str, sid: str, model: str, text: str) -> httpx.Response:
    body = {"model": model, "messages": [{"role": "user", "content": text}]}
    return c.post(url + "/v1/chat/completions", json=body, headers={"X-Session-Id": sid})


def answer_text(r: httpx.Response) -> Any:
    try:
        return r.json()["choices"][0]["message"]["content"]
    except (ValueError, KeyError, IndexError, TypeError):
        return r.text[:200]


@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_a_fault_is_an_error_of_its_own_and_no_later_request_gets_another_answer(
    raw: RawUpstream, client: httpx.Client, start_proxy, tmp_path: Path, fault: str
) -> None:
    from tests.conftest import make_settings

    upstream = {"name": "raw", "base_url": raw.url, "read_timeout": 0.5}
    proxy = start_proxy(make_settings(tmp_path, raw.url, upstreams=[upstream])).url
    # A first clean answer, so that the faulted request may go out on a kept-alive connection.
    assert answer_text(chat(client, proxy, "warm", "raw-echo", "warm-up")) == "echo: warm-up"
    r = chat(client, proxy, "faulted", f"fault:{fault}", f"{fault} itself")
    expected = FAULTS[fault][1]
    assert r.status_code == expected, r.text[:300]
    if expected >= 500:
        assert set(r.json()["error"]) >= {"message", "type", "param", "code"}
    x = record(proxy, "faulted")
    assert x["exchange"]["status"] == r.status_code
    # Never sent twice: the upstream may already be generating for the first one.
    assert [b["model"] for b in raw.requests].count(f"fault:{fault}") == 1
    time.sleep(0.15)  # bytes sent late by the upstream are in the pooled connection by now
    got = [
        answer_text(chat(client, proxy, f"after-{i}", "raw-echo", f"{fault} follower {i}"))
        for i in range(FOLLOWERS)
    ]
    assert got == [f"echo: {fault} follower {i}" for i in range(FOLLOWERS)]


@pytest.mark.parametrize("fault", ["status-999", "body-past-length", "header-nul"])
def test_on_the_messages_api_a_fault_is_a_502_in_anthropics_envelope(
    raw: RawUpstream, client: httpx.Client, start_proxy, tmp_path: Path, fault: str
) -> None:
    from tests.conftest import make_settings

    upstream = {"name": "raw", "base_url": raw.url, "read_timeout": 0.5}
    proxy = start_proxy(make_settings(tmp_path, raw.url, upstreams=[upstream])).url
    body = {
        "model": f"fault:{fault}",
        "max_tokens": 8,
        "messages": [{"role": "user", "content": "x"}],
    }
    r = client.post(proxy + "/v1/messages", json=body, headers={"X-Session-Id": "m"})
    assert r.status_code == 502, r.text
    assert r.json()["type"] == "error" and r.json()["error"]["type"] == "api_error"
    assert record(proxy, "m")["exchange"]["status"] == 502


def test_a_streamed_answer_with_bytes_past_its_end_ends_in_an_error_event(
    raw: RawUpstream, client: httpx.Client, start_proxy, tmp_path: Path
) -> None:
    from tests.conftest import make_settings

    upstream = {"name": "raw", "base_url": raw.url, "read_timeout": 0.5}
    proxy = start_proxy(make_settings(tmp_path, raw.url, upstreams=[upstream])).url
    body = {
        "model": "fault:events-then-forged-answer",
        "messages": [{"role": "user", "content": "streamed"}],
        "stream": True,
    }
    r = client.post(proxy + "/v1/chat/completions", json=body, headers={"X-Session-Id": "s"})
    events = [e for e in r.text.split("\n\n") if e.strip()]
    assert r.status_code == 200 and events[-1] == "data: [DONE]"
    assert '"upstream_invalid_response"' in events[-2]
    x = record(proxy, "s")
    assert x["exchange"]["status"] == 200 and x["error"]["code"] == "upstream_invalid_response"
    got = [answer_text(chat(client, proxy, f"s-{i}", "raw-echo", f"s{i}")) for i in range(10)]
    assert got == [f"echo: s{i}" for i in range(10)]


@pytest.mark.parametrize("name", ["httpx", "aiohttp-fresh"])
@pytest.mark.parametrize(
    "fault", ["late-408", "forged-answer-later", "forged-answer-after-body", "status-999"]
)
def test_the_other_selectable_clients_keep_one_answer_per_request(
    client: httpx.Client,
    start_proxy,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    name: str,
    fault: str,
) -> None:
    """CTXPROXY_UPSTREAM_CLIENT's other choices hold the default's line on the faults that leave
    bytes behind in a connection (the rest of this file runs with the default)."""
    monkeypatch.setenv("CTXPROXY_UPSTREAM_CLIENT", name)
    with RawUpstream() as raw:  # its own: the same fault is sent once per client
        test_a_fault_is_an_error_of_its_own_and_no_later_request_gets_another_answer(
            raw, client, start_proxy, tmp_path, fault
        )
