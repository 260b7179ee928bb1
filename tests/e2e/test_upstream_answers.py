"""Answers an upstream should not have given: cut short, stalled, not a chat completion, or
carrying headers that are not the client's business. The client gets a 502/504 in OpenAI's
envelope (an SSE error event once a stream began) and the exchange record is closed."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from proxy.testing.rawupstream import RawUpstream
from proxy.testing.servers import ServerThread
from tests.e2e.test_faults import envelope, sse_event, until

HELLO = [{"role": "user", "content": "hello there"}]


@pytest.fixture(scope="module")
def raw() -> Iterator[RawUpstream]:
    with RawUpstream() as upstream:
        yield upstream


@pytest.fixture(scope="module")
def proxy(raw: RawUpstream, tmp_path_factory) -> Iterator[str]:
    from proxy.app import create_app
    from proxy.testing.servers import make_settings

    upstream = {"name": "raw", "base_url": raw.url, "read_timeout": 0.5}
    settings = make_settings(tmp_path_factory.mktemp("answers"), raw.url, upstreams=[upstream])
    with ServerThread(create_app(settings)) as server:
        yield server.url


def post(url: str, model: str, sid: str, stream: bool) -> httpx.Response:
    body = {"model": model, "messages": HELLO, "stream": stream}
    return httpx.post(
        url + "/v1/chat/completions", json=body, headers={"X-Session-Id": sid}, timeout=10
    )


def record(url: str, sid: str) -> dict[str, Any]:
    """The exchange once closed (a stream's record closes just after its last byte)."""
    found: dict[str, Any] = {}

    def closed() -> bool:
        found.update(httpx.get(f"{url}/sessions/{sid}/exchanges/1", timeout=5).json())
        return found.get("exchange", {}).get("status") is not None

    until(closed)
    return found


@pytest.mark.parametrize("stream", [True, False])
@pytest.mark.parametrize(
    ("model", "status", "code"),
    [
        ("cut-json", 502, "upstream_unavailable"),
        ("cut-error", 502, "upstream_unavailable"),
        ("stall-json", 504, "upstream_timeout"),
        ("stall-error", 504, "upstream_timeout"),
    ],
)
def test_answer_cut_short_or_stalled_is_a_gateway_error_and_closes_the_record(
    proxy: str, model: str, status: int, code: str, stream: bool
) -> None:
    sid = f"{model}-{stream}"
    err = envelope(post(proxy, model, sid, stream), status)
    assert err["code"] == code and "'raw'" in err["message"]
    x = record(proxy, sid)
    assert x["exchange"]["status"] == status and x["exchange"]["pending"] is False
    assert x["error"]["code"] == code


@pytest.mark.parametrize(
    ("model", "stream"),
    [
        ("html", False),
        ("array", False),
        ("wrong-shape", False),
        ("no-choices", False),
        ("json-to-stream", True),
        ("html", True),
    ],
)
def test_a_success_that_is_not_a_chat_completion_is_502_invalid(
    proxy: str, model: str, stream: bool
) -> None:
    sid = f"bad-{model}-{stream}"
    err = envelope(post(proxy, model, sid, stream), 502)
    assert err["code"] == "upstream_invalid_response"
    x = record(proxy, sid)
    assert x["exchange"]["status"] == 502 and x["response"] is None
    assert x["error"]["code"] == "upstream_invalid_response"


def test_a_stream_ending_without_done_ends_in_an_error_event(proxy: str) -> None:
    r = post(proxy, "no-done", "no-done", True)
    assert r.status_code == 200
    events = [e for e in r.text.split("\n\n") if e.strip()]
    assert events[-1] == "data: [DONE]"
    assert sse_event(events[-2])["error"]["code"] == "upstream_invalid_response"
    assert sse_event(events[0])["choices"][0]["delta"]["content"] == "half"
    x = record(proxy, "no-done")
    assert x["exchange"]["partial"] is True and x["response"]["content"] == "half"
    assert x["error"]["code"] == "upstream_invalid_response"


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/completions"])
def test_upstream_cookies_and_internal_headers_stay_behind(proxy: str, path: str) -> None:
    body = {"model": "leaky", "messages": HELLO, "prompt": "x"}
    r = httpx.post(proxy + path, json=body, headers={"X-Session-Id": "leaky"}, timeout=10)
    assert r.status_code == 200
    assert json.loads(r.content)["choices"][0]["message"]["content"] == "fine"
    for name in ("set-cookie", "x-internal-token", "keep-alive", "proxy-authenticate"):
        assert name not in r.headers
    assert "upstream-secret" not in str(r.headers)
    assert r.headers.get("x-ctxproxy-session") in (None, "leaky")
    assert r.headers["retry-after"] == "3" and r.headers["x-request-id"] == "req-42"


@pytest.mark.parametrize("stream", [False, True])
def test_every_choice_is_recorded_when_n_is_2(proxy: str, stream: bool) -> None:
    sid = f"two-{stream}"
    body = {"model": "two-choices", "messages": HELLO, "stream": stream, "n": 2}
    r = httpx.post(
        proxy + "/v1/chat/completions", json=body, headers={"X-Session-Id": sid}, timeout=10
    )
    assert r.status_code == 200
    x = record(proxy, sid)
    first, second = ("first one", "second two") if stream else ("first", "second")
    assert x["response"]["content"] == first
    assert [c["content"] for c in x["choices"]] == [second]
