"""Slow clients (slowloris): a half-sent head or a trickled body is closed at its deadline, and
/healthz is served while more half-sent heads hang than the server takes connections."""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from proxy.app import create_app
from proxy.http.slow import Limits, guarded
from proxy.testing.servers import ServerThread, make_settings

HEAD_S, BODY_S, CAP = 1.0, 1.5, 40
HEAD = b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"


@pytest.fixture
def guarded_proxy(tmp_path: Path, upstream_url: str) -> Iterator[ServerThread]:
    app = create_app(make_settings(tmp_path, upstream_url))
    with ServerThread(app, http=guarded(Limits(HEAD_S, BODY_S, CAP))) as server:
        yield server


def half_head(server: ServerThread) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", server.port), timeout=10)
    sock.sendall(HEAD)
    return sock


def closed_after(sock: socket.socket, trickle: bytes = b"", every: float = 0.2) -> float:
    """Seconds until the server closes `sock`, sending `trickle` a byte every `every` s."""
    started = time.monotonic()
    sock.settimeout(every)
    for i in range(200):
        try:
            if sock.recv(1024) == b"":
                return time.monotonic() - started
        except TimeoutError:
            pass
        except ConnectionError:
            return time.monotonic() - started
        if trickle:
            try:
                sock.sendall(trickle[i % len(trickle) : i % len(trickle) + 1])
            except OSError:
                return time.monotonic() - started
    return float("inf")


def test_a_head_sent_a_line_at_a_time_is_closed_at_its_deadline(
    guarded_proxy: ServerThread,
) -> None:
    sock = half_head(guarded_proxy)
    with sock:
        took = closed_after(sock, trickle=b"X-Slow: a\r\n")
    assert HEAD_S * 0.8 < took < HEAD_S + 2


def test_a_connection_that_sends_nothing_is_closed_at_the_head_deadline(
    guarded_proxy: ServerThread,
) -> None:
    with socket.create_connection(("127.0.0.1", guarded_proxy.port), timeout=10) as sock:
        assert closed_after(sock) < HEAD_S + 2


def test_a_trickled_body_is_closed_at_its_deadline(guarded_proxy: ServerThread) -> None:
    sock = half_head(guarded_proxy)
    with sock:
        sock.sendall(b"Content-Type: application/json\r\nContent-Length: 5000\r\n\r\n{")
        took = closed_after(sock, trickle=b" ")
    assert BODY_S * 0.8 < took < BODY_S + 2


def test_healthz_is_served_while_more_heads_hang_than_the_cap(
    guarded_proxy: ServerThread,
) -> None:
    heads = [half_head(guarded_proxy) for _ in range(CAP + 20)]
    try:
        answers = [httpx.get(guarded_proxy.url + "/healthz", timeout=5) for _ in range(10)]
        assert [r.status_code for r in answers] == [200] * 10
        # the oldest heads made room; the rest are closed at their deadline
        assert all(closed_after(s) < HEAD_S + 2 for s in heads)
    finally:
        for s in heads:
            s.close()


def test_a_kept_alive_connection_idle_past_the_head_deadline_still_serves(
    guarded_proxy: ServerThread,
) -> None:
    with httpx.Client(base_url=guarded_proxy.url, timeout=5) as client:
        assert client.get("/healthz").status_code == 200
        time.sleep(HEAD_S + 0.5)  # idle: uvicorn's keep-alive timeout (5 s) governs, not ours
        r = client.post(
            "/v1/chat/completions",
            json={"model": "echo", "messages": [{"role": "user", "content": "hi"}]},
        )
        assert r.status_code == 200, r.text
        assert r.json()["choices"][0]["message"]["content"] == "echo: hi"


def test_serve_closes_a_half_sent_head(tmp_path: Path, upstream_url: str) -> None:
    """`ctxproxy serve` runs the guard with its settings (worker processes of `--workers N`
    read theirs on their first connection)."""
    from tests.e2e.test_cli_serve import Proxy, write_config

    cfg = write_config(tmp_path, upstream_url)
    args = ["serve", "--config", str(cfg)]
    proxy = Proxy(args, tmp_path, env={"CTXPROXY_LIMITS__HEAD_TIMEOUT_S": "1"})
    try:
        with socket.create_connection(("127.0.0.1", proxy.port), timeout=10) as sock:
            sock.sendall(HEAD)
            assert closed_after(sock, trickle=b"X-Slow: a\r\n") < 3
        assert httpx.get(proxy.url + "/healthz", timeout=5).status_code == 200
    finally:
        proxy.stop()


def test_a_body_below_the_rate_floor_is_closed_after_its_grace(
    tmp_path: Path, upstream_url: str
) -> None:
    app = create_app(make_settings(tmp_path, upstream_url))
    limits = Limits(HEAD_S, 60.0, CAP, body_grace_s=1.0, body_min_bytes_per_s=100.0)
    with ServerThread(app, http=guarded(limits)) as server:
        sock = half_head(server)
        with sock:
            sock.sendall(b"Content-Type: application/json\r\nContent-Length: 5000\r\n\r\n{")
            took = closed_after(sock, trickle=b" ", every=0.5)  # 2 bytes/s, under 100
    assert 0.8 < took < 4  # the grace and the few bytes' credit, far from the 60 s deadline


def test_a_body_above_the_rate_floor_is_served(tmp_path: Path, upstream_url: str) -> None:
    app = create_app(make_settings(tmp_path, upstream_url))
    limits = Limits(HEAD_S, 60.0, CAP, body_grace_s=0.5, body_min_bytes_per_s=100.0)
    body = b'{"model": "echo", "messages": [{"role": "user", "content": "hi"}]}'.ljust(400)
    with ServerThread(app, http=guarded(limits)) as server:
        with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
            sock.sendall(HEAD + b"Content-Type: application/json\r\n")
            sock.sendall(b"Content-Length: %d\r\nConnection: close\r\n\r\n" % len(body))
            for i in range(0, len(body), 50):  # 500 bytes/s for 0.8 s, past the grace
                sock.sendall(body[i : i + 50])
                time.sleep(0.1)
            answer = sock.makefile("rb").read()
    assert answer.startswith(b"HTTP/1.1 200"), answer[:300]
    assert b"echo: hi" in answer


SLOW_BODY = HEAD + b"Content-Type: application/json\r\nContent-Length: 100000\r\n\r\n{"
FLOOD, FLOOD_CAP = 24, 16  # as 300 at a cap of 256, and more


async def _trickle_forever(port: int, stop: asyncio.Event) -> None:
    """One slow-body client: a byte every 0.5 s, reconnecting whenever it is closed."""
    while not stop.is_set():
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
        except OSError:
            await asyncio.sleep(0.05)
            continue
        try:
            writer.write(SLOW_BODY)
            while not stop.is_set():
                try:
                    if await asyncio.wait_for(reader.read(1024), 0.5) == b"":
                        break
                except TimeoutError:
                    pass
                writer.write(b" ")
        except OSError:
            pass
        finally:
            writer.close()


async def _ask(port: int, request: bytes) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(request)
        return await asyncio.wait_for(reader.read(), 5)
    finally:
        writer.close()


async def _flood_and_probe(port: int) -> tuple[list[bytes], bytes]:
    stop = asyncio.Event()
    flood = [asyncio.create_task(_trickle_forever(port, stop)) for _ in range(FLOOD)]
    await asyncio.sleep(1.5)  # the cap is full of slow bodies, and the first ones reconnect
    health = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
    ready = health.replace(b"/healthz", b"/readyz")
    probes = []
    for i in range(20):
        probes.append(await _ask(port, ready if i % 4 == 3 else health))
        await asyncio.sleep(0.1)
    chat = b'{"model": "echo", "messages": [{"role": "user", "content": "hi"}]}'
    answer = await _ask(
        port,
        HEAD + b"Content-Type: application/json\r\nConnection: close\r\n"
        b"Content-Length: %d\r\n\r\n%s" % (len(chat), chat),
    )
    stop.set()
    await asyncio.gather(*flood)
    return probes, answer


def test_serve_answers_health_and_chat_through_a_slow_body_flood(
    tmp_path: Path, upstream_url: str
) -> None:
    """More slow-body connections than the cap, each reopened when closed: the cap closes the
    slowest to make room, so every probe and an ordinary chat are answered."""
    from tests.e2e.test_cli_serve import Proxy, write_config

    cfg = write_config(tmp_path, upstream_url)
    env = {"CTXPROXY_LIMITS__MAX_CONNECTIONS": str(FLOOD_CAP)}
    proxy = Proxy(["serve", "--config", str(cfg)], tmp_path, env=env)
    try:
        probes, chat = asyncio.run(_flood_and_probe(proxy.port))
    finally:
        proxy.stop()
    assert [p.split(b"\r\n", 1)[0] for p in probes] == [b"HTTP/1.1 200 OK"] * 20
    assert chat.startswith(b"HTTP/1.1 200") and b"echo: hi" in chat, chat[:300]
    assert "unhandled error" not in proxy.log.read_text()  # a closed body is no server error
