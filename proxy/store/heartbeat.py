"""This process's heartbeat in the store, and the sweep that closes what dead processes left
open: at start-up, then every SWEEP seconds. A thread rather than a task, so that a busy event
loop cannot make a live process look dead."""

from __future__ import annotations

import logging
import os
import socket
import threading
import uuid

from proxy.store import Store

log = logging.getLogger("ctxproxy.liveness")

HEARTBEAT = 10.0  # seconds between heartbeats
STALE = 60.0  # a heartbeat this old means the process is gone (another host, or a reused pid)
SWEEP = 30.0


class Liveness:
    def __init__(self, store: Store, heartbeat: float = HEARTBEAT, stale: float = STALE):
        self.store, self.heartbeat, self.stale = store, heartbeat, stale
        self.host = socket.gethostname()[:255]
        self.instance = f"{self.host[:80]}:{os.getpid()}:{uuid.uuid4().hex[:12]}"
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="ctxproxy-liveness", daemon=True)

    def start(self) -> None:
        self.store.register_instance(self.instance, self.host, os.getpid())
        closed = self.store.close_dead(self.host, self.stale, orphans=True)
        if closed:
            log.warning("closed %d exchanges left open by stopped processes", closed)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        try:
            self.store.retire()
        except Exception:  # the database went first: the next start closes what is left
            log.exception("closing this process's open exchanges failed")

    def _run(self) -> None:
        since_sweep = 0.0
        while not self._stop.wait(self.heartbeat):
            try:
                self.store.heartbeat()
                since_sweep += self.heartbeat
                if since_sweep >= SWEEP:
                    since_sweep = 0.0
                    if closed := self.store.close_dead(self.host, self.stale):
                        log.warning("closed %d exchanges of a stopped process", closed)
            except Exception:  # a database hiccup must not end the heartbeat for good
                log.exception("heartbeat failed")
