"""What `ctxproxy serve` changes in the interpreter before it serves: the GIL's switch interval,
malloc's mmap threshold and the collector's settings. `create_app` changes none of it, so an
app embedded elsewhere leaves its host process as it found it."""

from __future__ import annotations

import gc
import sys

from proxy.http.memory import tune_malloc

SWITCH_INTERVAL_S = 0.0005
YOUNG_OBJECTS = 20_000  # allocations between young collections (Python's default: 700)


def prepare() -> None:
    """Once, after the app is built and before it serves."""
    # Work on the thread pool (compile, hashing, storing a long history) holds the GIL between
    # its I/O; the event loop and other requests' threads get it back within this interval
    # (Python's default, 5 ms, queues a request for tens of ms behind it).
    sys.setswitchinterval(SWITCH_INTERVAL_S)
    tune_malloc()
    settle_heap()


def settle_heap() -> None:
    """What start-up made (modules, the app) lives as long as the process, so the collector
    stops walking it, and a long history's parse (thousands of dicts) sets off a collection a
    request rather than dozens. Each collection walked the whole heap from time to time,
    holding the GIL: the cost of a turn grew with its history and the event loop stalled."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(YOUNG_OBJECTS, *gc.get_threshold()[1:])
