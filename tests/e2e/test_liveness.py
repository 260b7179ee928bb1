"""What a dead process left open is closed by the next start, keeping the text streamed so far;
what a live process serves is left alone. (A real kill -9 of `ctxproxy serve`:
tests/e2e/test_sessions_audit.py; under load, SQLite and PostgreSQL: bench/killload.py.)"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from proxy.store import Store
from proxy.store.heartbeat import Liveness
from proxy.testing.postgres import postgres_database
from proxy.testing.records import new_request

HOST = socket.gethostname()


@pytest.fixture(params=["sqlite", "postgresql"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'live.db'}"
        return
    with postgres_database("ctxproxy_live") as pg:
        yield pg


def a_dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid  # exited and reaped: no such process now


def open_exchange(store: Store, sid: str, progress: str | None) -> None:
    ref = store.record_request(
        new_request(
            sid,
            [{"role": "user", "content": "hi"}],
            stream=True,
            tokens_original=1,
            tokens_compiled=1,
        )
    )
    if progress is not None:
        store.save_progress(ref, {"role": "assistant", "content": progress})


def test_a_start_closes_what_dead_processes_left_open_and_nothing_live(url: str) -> None:
    dead, live = Store(url), Store(url)
    dead.upgrade()
    dead.register_instance("dead-one", HOST, a_dead_pid())
    live.register_instance("live-one", HOST, os.getpid())
    open_exchange(dead, "streaming", "0 1 2 ")
    open_exchange(dead, "waiting", None)
    open_exchange(live, "alive", "still going")

    starting = Store(url)
    liveness = Liveness(starting)
    liveness.start()

    streamed = starting.get_exchange("streaming", 1)
    assert streamed is not None and streamed.exchange.status == 200
    assert streamed.exchange.partial and streamed.error["code"] == "interrupted"
    assert streamed.response == {"role": "assistant", "content": "0 1 2 "}
    history = starting.get_history("streaming")
    assert [m.message["content"] for m in history.messages] == ["hi", "0 1 2 "]
    waiting = starting.get_exchange("waiting", 1)
    assert waiting.exchange.status == 500 and waiting.error["code"] == "interrupted"
    assert waiting.response is None
    assert starting.get_exchange("alive", 1).exchange.pending  # its process still runs
    liveness.stop()  # its heartbeat, before the database goes
    for store in (dead, live, starting):
        store.close()


def test_a_clean_stop_closes_its_own_open_exchanges(url: str) -> None:
    store = Store(url)
    store.upgrade()
    liveness = Liveness(store)
    liveness.start()
    open_exchange(store, "mine", "half")
    liveness.stop()
    x = store.get_exchange("mine", 1)
    assert x.exchange.status == 200 and x.error["code"] == "interrupted"
    store.close()
