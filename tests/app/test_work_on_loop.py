"""A small request's store and compile run on the event loop, which never waits for the write
lock: while another thread holds it, the request's writes go to a thread, the loop serves
everyone else, and the request is answered and recorded once the lock is free."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import httpx

from proxy.settings import Settings
from proxy.testing.scripted import Script
from proxy.testing.servers import ServerThread

HELD_S = 1.5


def test_a_held_write_lock_stalls_only_the_writes_that_need_it(
    start_proxy: Callable[[Settings], ServerThread],
    settings_for: Callable[..., Settings],
    script: Script,
) -> None:
    proxy = start_proxy(settings_for())
    store = proxy.server.config.app.state.services.store
    chat = proxy.url + "/v1/chat/completions"
    body = {"model": "echo", "messages": [{"role": "user", "content": "hello there"}]}
    assert httpx.post(chat, json=body, headers={"x-session-id": "warm"}, timeout=10).is_success

    taken, release = threading.Event(), threading.Event()

    def hold() -> None:
        with store._writer.locked():  # a long write elsewhere (a big history, a prune)
            taken.set()
            release.wait(10)

    holder = threading.Thread(target=hold)
    holder.start()
    assert taken.wait(5)
    try:
        with ThreadPoolExecutor(2) as pool:
            started = time.monotonic()
            asked = pool.submit(
                httpx.post, chat, json=body, headers={"x-session-id": "held"}, timeout=10
            )
            time.sleep(0.2)  # the request is waiting for the lock by now
            health = httpx.get(proxy.url + "/healthz", timeout=10)
            served = time.monotonic() - started
            assert health.status_code == 200 and served < HELD_S / 2  # the loop was free
            assert not asked.done()  # its request record waits for the lock, on a thread
            time.sleep(HELD_S - (time.monotonic() - started))
            release.set()
            r = asked.result(timeout=10)
    finally:
        release.set()
        holder.join(10)
    assert r.status_code == 200 and "echo: hello there" in r.text
    x = httpx.get(proxy.url + "/sessions/held/exchanges/1", timeout=10).json()
    assert x["exchange"]["status"] == 200
    assert x["response"]["content"].strip() == "echo: hello there"
