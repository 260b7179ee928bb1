"""Faults on either side: the client gets the documented error, the upstream connection is let go,
and the exchange is stored with its status and error."""

from __future__ import annotations

import asyncio
import json
import signal
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from proxy.app import create_app
from proxy.settings import Settings
from proxy.testing.scripted import Script
from proxy.testing.servers import ServerThread, free_port
from tests.e2e.test_cli_serve import Proxy, write_config

JSON = {"Content-Type": "application/json"}
HELLO = [{"role": "user", "content": "hello there"}]


class _Tracked(httpx.AsyncByteStream):
    def __init__(self, inner: Any, owner: Counting):
        self.inner, self.owner, self.closed = inner, owner, False

    async def __aiter__(self):
        async for part in self.inner:
            yield part

    async def aclose(self) -> None:
        if not self.closed:
            self.closed = True
            self.owner.open -= 1
        await self.inner.aclose()


class Counting(httpx.AsyncBaseTransport):
    """The proxy's real transport, counting upstream responses it has not closed yet."""

    def __init__(self) -> None:
        self.inner = httpx.AsyncHTTPTransport()
        self.open = 0

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        response = await self.inner.handle_async_request(request)
        self.open += 1
        response.stream = _Tracked(response.stream, self)
        return response

    async def aclose(self) -> None:
        await self.inner.aclose()


class Faulty:
    def __init__(self, server: ServerThread, transport: Counting):
        self.server, self.transport, self.url = server, transport, server.url

    def post(self, body: Any = None, sid: str = "f-1", **kw: Any) -> httpx.Response:
        headers = {"X-Session-Id": sid, **kw.pop("headers", {})}
        return httpx.post(
            self.url + "/v1/chat/completions", json=body, headers=headers, timeout=10, **kw
        )

    def stream_text(self, body: dict[str, Any], sid: str = "f-1") -> tuple[int, list[str]]:
        with httpx.stream(
            "POST",
            self.url + "/v1/chat/completions",
            json={**body, "stream": True},
            headers={"X-Session-Id": sid},
            timeout=10,
        ) as r:
            text = r.read().decode()
        return r.status_code, [e for e in text.split("\n\n") if e.strip()]

    def exchange(self, sid: str = "f-1", seq: int = 1) -> dict[str, Any]:
        """The stored exchange once finished (a stream's record completes after its last byte)."""
        deadline = time.monotonic() + 5
        while True:
            x = httpx.get(f"{self.url}/sessions/{sid}/exchanges/{seq}", timeout=5).json()
            if x.get("exchange", {}).get("status") is not None or time.monotonic() > deadline:
                return x
            time.sleep(0.05)

    def let_go(self, script: Script | None = None) -> bool:
        """Every upstream response closed on our side and, for streams, seen closed upstream."""
        return until(lambda: self.transport.open == 0 and (script is None or script.streaming == 0))


def until(check: Callable[[], bool], timeout: float = 5) -> bool:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


@pytest.fixture
def faulty(settings_for, upstream_url: str) -> Iterator[Callable[..., Faulty]]:
    servers: list[ServerThread] = []

    def start(base_url: str | None = None, **overrides: Any) -> Faulty:
        upstream = {"name": "scripted", "base_url": base_url or upstream_url, "read_timeout": 0.5}
        settings: Settings = settings_for(upstreams=[upstream], **overrides)
        transport = Counting()
        servers.append(ServerThread(create_app(settings, transport=transport)).__enter__())
        return Faulty(servers[-1], transport)

    yield start
    for server in servers:
        server.__exit__()


def envelope(r: httpx.Response, status: int) -> dict[str, Any]:
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert set(err) >= {"message", "type", "param", "code"} and "Traceback" not in r.text
    return err


def sse_event(raw: str) -> Any:
    return json.loads(raw.removeprefix("data: "))


# --- upstream faults ----------------------------------------------------------------------


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize(
    ("fault", "status", "code"),
    [("refused", 502, "upstream_unavailable"), ("hang", 504, "upstream_timeout")],
)
def test_no_answer_at_all_is_a_gateway_error_and_stored(
    faulty, fault: str, status: int, code: str, stream: bool
) -> None:
    proxy = faulty(f"http://127.0.0.1:{free_port()}/v1" if fault == "refused" else None)
    r = proxy.post({"model": fault, "messages": HELLO, "stream": stream})
    assert envelope(r, status)["code"] == code
    assert proxy.let_go()
    x = proxy.exchange()
    assert x["exchange"]["status"] == status and x["error"]["code"] == code
    assert x["request"]["messages"] == HELLO and x["response"] is None


@pytest.mark.parametrize(
    ("model", "code", "partial"),
    [
        ("reset", "upstream_unavailable", "partial"),
        ("stall", "upstream_timeout", "partial"),
        ("garbled", "upstream_invalid_response", "partial"),
        ("not-sse", "upstream_invalid_response", None),
    ],
)
def test_stream_failing_midway_ends_in_an_sse_error_and_is_stored_partial(
    faulty, script: Script, model: str, code: str, partial: str | None
) -> None:
    proxy = faulty()
    status, events = proxy.stream_text({"model": model, "messages": HELLO})
    assert status == 200
    assert events[-1] == "data: [DONE]"
    assert sse_event(events[-2])["error"]["code"] == code
    # Every event before the error is one the client can parse: nothing malformed relayed.
    assert all("choices" in sse_event(e) for e in events[:-2])
    relayed = "".join(events[:-2])
    assert "cut off" not in relayed and "<html>" not in relayed
    assert proxy.let_go(script)
    x = proxy.exchange()
    assert x["exchange"]["status"] == 200 and x["exchange"]["partial"] is True
    assert x["error"]["code"] == code
    assert (x["response"] or {}).get("content") == partial


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("code", [500, 429])
def test_upstream_error_status_passes_through_and_is_stored(
    faulty, code: int, stream: bool
) -> None:
    proxy = faulty()
    r = proxy.post({"model": f"fail-{code}", "messages": HELLO, "stream": stream})
    assert r.status_code == code
    assert r.json()["error"]["message"] == f"scripted failure {code}"
    assert r.headers.get("retry-after") == ("7" if code == 429 else None)
    assert proxy.let_go()
    x = proxy.exchange()
    assert x["exchange"]["status"] == code
    assert x["error"]["message"] == f"scripted failure {code}"


# --- client faults ------------------------------------------------------------------------


def test_client_gone_mid_stream_cancels_upstream_and_stores_partial(faulty, script: Script) -> None:
    proxy = faulty()
    with httpx.stream(
        "POST",
        proxy.url + "/v1/chat/completions",
        json={"model": "slow", "messages": HELLO, "stream": True},
        headers={"X-Session-Id": "f-1"},
        timeout=10,
    ) as r:
        lines = r.iter_lines()
        next(lines), next(lines)
    assert proxy.let_go(script) and script.slow_finished == [False]
    x = proxy.exchange()
    assert x["exchange"]["partial"] is True and x["response"]["content"].startswith("0 ")


def raw_request(port: int, body: bytes, *, split: float | None = None) -> socket.socket:
    """A hand-driven HTTP/1.1 client: `split` sends that share of the body, leaving the rest."""
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)  # a small window: backpressure soon
    s.connect(("127.0.0.1", port))
    head = (
        "POST /v1/chat/completions HTTP/1.1\r\nHost: localhost\r\n"
        "Content-Type: application/json\r\n"
        f"X-Session-Id: raw-{port}\r\nContent-Length: {len(body)}\r\n\r\n"
    )
    sent = len(body) if split is None else int(len(body) * split)
    s.sendall(head.encode() + body[:sent])
    return s


def concurrent_echoes(url: str, n: int) -> list[str]:
    async def one(c: httpx.AsyncClient, i: int) -> str:
        body = {"model": "echo", "messages": [{"role": "user", "content": f"n{i}"}]}
        async with c.stream("POST", "/v1/chat/completions", json={**body, "stream": True}) as r:
            return (await r.aread()).decode()

    async def main() -> list[str]:
        async with httpx.AsyncClient(base_url=url, timeout=10) as c:
            return await asyncio.gather(*(one(c, i) for i in range(n)))

    return asyncio.run(main())


def test_slow_reader_and_slow_sender_hold_up_no_one_else(faulty, script: Script) -> None:
    proxy = faulty()
    body = json.dumps({"model": "bulk", "messages": HELLO, "stream": True}).encode()
    reader = raw_request(proxy.server.port, body)
    half = raw_request(proxy.server.port, body.replace(b'"bulk"', b'"echo"'), split=0.5)
    try:
        assert reader.recv(100).startswith(b"HTTP/1.1 200")  # then stop reading: 4 MiB wait
        started = time.monotonic()
        outs = concurrent_echoes(proxy.url, 16)
        assert time.monotonic() - started < 5
        assert all("data: [DONE]" in o for o in outs)
        assert all(f"n{i} " in o for i, o in enumerate(outs))
        half.sendall(body.replace(b'"bulk"', b'"echo"')[len(body) // 2 :])
        got = b""
        while not got.endswith(b"0\r\n\r\n"):
            part = reader.recv(1 << 16)
            assert part, "connection closed early"
            got += part
        assert got.endswith(b"data: [DONE]\n\n\r\n0\r\n\r\n")
        answer = b""
        while not answer.endswith(b"0\r\n\r\n"):
            part = half.recv(4096)
            assert part, "connection closed early"
            answer += part
        assert answer.startswith(b"HTTP/1.1 200") and b'"hello "' in answer
    finally:
        reader.close()
        half.close()
    x = proxy.exchange(f"raw-{proxy.server.port}")
    assert x["exchange"]["status"] == 200 and x["exchange"]["partial"] is False
    assert len(x["response"]["content"]) == 64 * 65536


def test_oversized_chunked_body_is_413_and_the_proxy_carries_on(faulty) -> None:
    proxy = faulty(max_body_bytes=10_000)

    def chunks() -> Iterator[bytes]:  # no Content-Length: the limit must hold while reading
        yield b'{"model": "echo", "messages": [{"role": "user", "content": "'
        for _ in range(100):
            yield b"x" * 1000
        yield b'"}]}'

    r = httpx.post(proxy.url + "/v1/chat/completions", content=chunks(), headers=JSON, timeout=10)
    assert envelope(r, 413)["code"] == "request_too_large"
    assert httpx.get(proxy.url + "/sessions").json()["total"] == 0
    assert proxy.post({"model": "echo", "messages": HELLO}).status_code == 200


def nested(depth: int) -> str:
    return "[" * depth + "]" * depth


@pytest.mark.parametrize(
    ("raw", "status"),
    [
        (b"", 400),
        (b"null", 400),
        (b'"just a string"', 400),
        (b"\xff\xfe{}", 400),
        (b'{"model": "echo", "messages": [', 400),
        (b'{"model": "echo", "messages": [{"role": "user", "content": "\\ud800"}]}', 400),
        (b'{"model": "echo", "messages": [{"role": "user", "content": "hi"}], "top_p": NaN}', 400),
        (b'{"model": "echo", "messages": [{"role": "user", "content": "hi"}], "n": Infinity}', 400),
        (b'{"model": "echo", "messages": ' + nested(50_000).encode() + b"}", 400),
        # Deep but within the depth limit (128): an unknown field passes through untouched.
        (
            b'{"model": "echo", "messages": [{"role": "user", "content": "hi"}], "x": '
            + nested(100).encode()
            + b"}",
            200,
        ),
        (
            b'{"model": "echo", "messages": [{"role": "user", "content": "hi", "x": '
            + nested(100).encode()
            + b"}]}",
            200,
        ),
        (
            b'{"model": "echo", "messages": [{"role": "user", "content": "hi"}], "x": '
            + nested(500).encode()
            + b"}",
            400,
        ),
    ],
)
def test_invalid_or_deep_json(faulty, raw: bytes, status: int) -> None:
    proxy = faulty()
    r = httpx.post(proxy.url + "/v1/chat/completions", content=raw, headers=JSON, timeout=10)
    if status == 200:
        assert r.status_code == 200, r.text
    else:
        envelope(r, status)


VALID: dict[str, Any] = {
    "model": "echo",
    "messages": [
        {"role": "system", "content": "terse"},
        {"role": "user", "content": [{"type": "text", "text": "weather?"}]},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "w", "arguments": "{}"}}
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "sunny", "name": "w"},
    ],
    "stream": False,
    "stream_options": {"include_usage": True},
    "tools": [{"type": "function", "function": {"name": "w", "parameters": {}}}],
    "max_tokens": 100,
    "max_completion_tokens": 100,
    "user": "someone",
    "metadata": {"session_id": "s"},
}

# Each field ctxproxy reads, with values of the wrong type (pydantic's lax mode would accept
# "true" for a bool or 3.0 for an int, so these are wrong in any mode).
WRONG_TYPES = [
    ("model", [5, None, [], {}]),
    ("messages", ["hi", {}, None, 5]),
    ("messages.0", ["hi", 5, None, []]),
    ("messages.0.role", [5, None, "wizard", []]),
    ("messages.0.content", [5, {}, True]),
    ("messages.1.content.0", ["text", 5, None]),
    ("messages.1.content.0.type", [5, None]),
    ("messages.3.name", [5, [], {}]),
    ("messages.2.tool_calls", ["c1", {}, 5]),
    ("messages.2.tool_calls.0", ["c1", 5, None]),
    ("messages.2.tool_calls.0.id", [5, None, []]),
    ("messages.2.tool_calls.0.type", [5, []]),
    ("messages.2.tool_calls.0.function", ["w", 5, None]),
    ("messages.2.tool_calls.0.function.name", [5, None]),
    ("messages.2.tool_calls.0.function.arguments", [{}, 5, None]),
    ("messages.3.tool_call_id", [5, [], {}]),
    ("stream", ["maybe", 2, [], {}]),
    ("stream_options", ["yes", 5, []]),
    ("stream_options.include_usage", ["maybe", 2, []]),
    ("tools", ["w", {}, 5]),
    ("tools.0", ["w", 5, None]),
    ("max_tokens", ["many", 1.5, -1, [], {}]),
    ("max_completion_tokens", ["many", 1.5, -1, []]),
    ("user", [5, [], {}]),
    ("metadata", ["s", 5, []]),
]


def replaced(path: str, value: Any) -> dict[str, Any]:
    body = json.loads(json.dumps(VALID))
    *parents, last = path.split(".")
    node: Any = body
    for key in parents:
        node = node[int(key) if isinstance(node, list) else key]
    node[int(last) if isinstance(node, list) else last] = value
    return body


@pytest.fixture(scope="module")
def typed_proxy(scripted_server, tmp_path_factory) -> Iterator[str]:
    from proxy.testing.servers import make_settings

    _, upstream = scripted_server
    settings = make_settings(tmp_path_factory.mktemp("types"), upstream.url + "/v1")
    with ServerThread(create_app(settings)) as server:
        yield server.url


def test_the_valid_request_passes(typed_proxy: str) -> None:
    r = httpx.post(typed_proxy + "/v1/chat/completions", json=VALID, timeout=10)
    assert r.status_code == 200, r.text


@pytest.mark.parametrize(
    ("path", "value"), [(p, v) for p, values in WRONG_TYPES for v in values], ids=str
)
def test_wrong_type_in_any_field_is_400_naming_it(typed_proxy: str, path: str, value: Any) -> None:
    r = httpx.post(typed_proxy + "/v1/chat/completions", json=replaced(path, value), timeout=10)
    err = envelope(r, 400)
    # Named down to the field, or to the list or object that holds the wrong item.
    assert path.startswith(err["param"]) or err["param"].startswith(path), err


@pytest.mark.parametrize("options", ["big", 5, [1]])
def test_ollama_options_of_the_wrong_type_are_the_upstreams_to_refuse(
    start_proxy, settings_for, upstream_url: str, script: Script, options: Any
) -> None:
    upstream = {"name": "o", "kind": "ollama", "base_url": upstream_url, "context_window": 4096}
    proxy = start_proxy(settings_for(upstreams=[upstream]))
    body = {"model": "echo", "messages": HELLO, "options": options}
    r = httpx.post(proxy.url + "/v1/chat/completions", json=body, timeout=10)
    assert r.status_code == 200, r.text
    assert script.received[-1]["options"] == options


# --- a client's own broken tool-call pairing ----------------------------------------------

CALL = {"id": "call_x", "type": "function", "function": {"name": "run", "arguments": "{}"}}
UNANSWERED = [
    {"role": "user", "content": "run it"},
    {"role": "assistant", "content": None, "tool_calls": [CALL]},
    {"role": "user", "content": "well?"},
]
ORPHAN = [
    {"role": "user", "content": "hi"},
    {"role": "tool", "tool_call_id": "call_gone", "content": "stale"},
    {"role": "user", "content": "again"},
]


@pytest.mark.parametrize(
    ("messages", "index", "call_id"), [(UNANSWERED, 1, "call_x"), (ORPHAN, 1, "call_gone")]
)
def test_broken_pairing_rejected_naming_the_message(
    faulty, script: Script, messages: list, index: int, call_id: str
) -> None:
    proxy = faulty()
    err = envelope(proxy.post({"model": "echo", "messages": messages}), 400)
    assert err["code"] == "invalid_tool_pairing" and err["param"] == f"messages[{index}]"
    assert f"messages[{index}]" in err["message"] and repr(call_id) in err["message"]
    assert script.received == []


def test_broken_pairing_repaired_when_configured(faulty, script: Script) -> None:
    proxy = faulty(compaction={"invalid_pairing": "repair"})
    assert proxy.post({"model": "echo", "messages": UNANSWERED}).status_code == 200
    sent = script.received[-1]["messages"]
    assert sent[:2] == UNANSWERED[:2] and sent[3:] == UNANSWERED[2:]
    assert sent[2]["role"] == "tool" and sent[2]["tool_call_id"] == "call_x"
    assert proxy.post({"model": "echo", "messages": ORPHAN}, sid="f-2").status_code == 200
    assert script.received[-1]["messages"] == [ORPHAN[0], ORPHAN[2]]
    x = proxy.exchange()
    assert x["request"]["messages"] == UNANSWERED  # the raw history, as sent
    assert x["compiled_request"]["messages"] == sent


def test_broken_pairing_passed_on_when_configured(faulty, script: Script) -> None:
    proxy = faulty(compaction={"invalid_pairing": "pass"})
    assert proxy.post({"model": "echo", "messages": ORPHAN}).status_code == 200
    assert script.received[-1]["messages"] == ORPHAN


# --- graceful shutdown ---------------------------------------------------------------------


def test_sigterm_lets_streams_finish_and_commits_their_records(
    tmp_path: Path, upstream_url: str
) -> None:
    cfg = write_config(tmp_path, upstream_url)
    proxy = Proxy(["serve", "--config", str(cfg)], tmp_path)
    results: dict[int, str] = {}
    first_lines = threading.Barrier(4)

    def read(i: int) -> None:
        with httpx.stream(
            "POST",
            proxy.url + "/v1/chat/completions",
            json={
                "model": "slow",
                "messages": [{"role": "user", "content": f"s{i}"}],
                "stream": True,
            },
            headers={"X-Session-Id": f"term-{i}"},
            timeout=20,
        ) as r:
            lines = r.iter_lines()
            first = next(lines)
            first_lines.wait(timeout=10)
            results[i] = "\n".join([first, *lines]).strip()

    readers = [threading.Thread(target=read, args=(i,)) for i in range(3)]
    for t in readers:
        t.start()
    first_lines.wait(timeout=10)  # all three streams are in flight
    proxy.proc.send_signal(signal.SIGTERM)
    time.sleep(0.3)
    with pytest.raises(httpx.ConnectError):  # no new work once shutting down
        httpx.get(proxy.url + "/healthz", timeout=2)
    for t in readers:
        t.join(timeout=20)
    assert proxy.proc.wait(timeout=20) in (0, -signal.SIGTERM)
    for i in range(3):
        assert results[i].count("data: ") == 201 and results[i].endswith("data: [DONE]")
    after = Proxy(["serve", "--config", str(cfg)], tmp_path)
    try:
        for i in range(3):
            x = httpx.get(f"{after.url}/sessions/term-{i}/exchanges/1", timeout=5).json()
            assert x["exchange"]["status"] == 200 and x["exchange"]["partial"] is False
            assert x["response"]["content"].endswith("199 ")
    finally:
        after.stop()
