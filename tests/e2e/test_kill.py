"""kill -9 mid-answer: the next start closes what the dead process left open, as interrupted,
keeping the text the client had already been sent; live processes' exchanges are left alone."""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.e2e.test_cli_serve import Proxy
from tests.e2e.test_scale_out import config
from tests.postgres import postgres_database

HELLO = [{"role": "user", "content": "hi"}]


@pytest.fixture(params=["sqlite", "postgresql"])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'kill.db'}"
        return
    with postgres_database("ctxproxy_kill") as url:
        yield url


def read_some(url: str, sid: str, seconds: float) -> str:
    """Stream the 'slow' answer (200 chunks, 20 ms apart) for a while; the text seen so far."""
    seen: list[str] = []
    try:
        with httpx.stream(
            "POST",
            url + "/v1/chat/completions",
            json={"model": "slow", "messages": HELLO, "stream": True},
            headers={"X-Session-Id": sid},
            timeout=10,
        ) as r:
            started = time.monotonic()
            for line in r.iter_lines():
                if line.startswith("data: {"):
                    seen.append(line.split('"content": "')[1].split('"')[0])
                if time.monotonic() - started > seconds:
                    break
    except httpx.HTTPError:
        pass
    return "".join(seen)


def post_quietly(url: str, model: str, sid: str) -> None:
    try:
        httpx.post(
            url + "/v1/chat/completions",
            json={"model": model, "messages": HELLO},
            headers={"X-Session-Id": sid},
            timeout=10,
        )
    except httpx.HTTPError:
        pass  # the process it waits on is killed


def test_kill_9_mid_stream_then_restart_closes_the_record_keeping_the_text(
    tmp_path: Path, upstream_url: str, database_url: str
) -> None:
    cfg = config(tmp_path, "kill", database_url, upstream_url)
    victim = Proxy(["serve", "--config", str(cfg)], tmp_path)
    # On PostgreSQL, as in a scale-out, another process serves at the same time; on SQLite
    # (one host, one process) the restart is the only other one.
    two = database_url.startswith("postgresql")
    survivor = Proxy(["serve", "--config", str(cfg)], tmp_path) if two else victim
    try:
        hung = threading.Thread(target=post_quietly, args=(victim.url, "hang", "never-answered"))
        hung.start()
        live: dict[str, str] = {}
        reader = threading.Thread(
            target=lambda: live.setdefault("text", read_some(survivor.url, "alive", 30))
        )
        if two:
            reader.start()
        seen = read_some(victim.url, "killed", 1.5)
        assert seen.startswith("0 1 2 ")
        victim.stop(signal.SIGKILL)
        hung.join()
        restarted = Proxy(["serve", "--config", str(cfg)], tmp_path)
        try:
            x = httpx.get(f"{restarted.url}/sessions/killed/exchanges/1", timeout=5).json()
            assert x["exchange"]["pending"] is False and x["exchange"]["partial"] is True
            assert x["error"]["code"] == "interrupted"
            kept = x["response"]["content"]
            assert kept and seen.startswith(kept) and len(kept) >= len("0 1 2 ")
            z = httpx.get(f"{restarted.url}/sessions/never-answered/exchanges/1").json()
            assert z["exchange"]["status"] == 500 and z["error"]["code"] == "interrupted"
            assert z["response"] is None
            if not two:
                return
            # The survivor's stream is its own to finish, not the restart's to close.
            reader.join(timeout=20)
            assert live["text"].endswith("199 ")
            y = httpx.get(f"{restarted.url}/sessions/alive/exchanges/1", timeout=5).json()
            assert y["exchange"]["partial"] is False and y["error"] is None
            assert y["response"]["content"] == live["text"]
        finally:
            restarted.stop()
    finally:
        for p in (victim, survivor):
            if p.proc.poll() is None:
                p.stop(signal.SIGKILL)
