"""The store's share of a continuing turn: record_request + finish_exchange, wall and CPU ms per
turn, nothing else running in the process. Pair it with an older tree for a before -> after:

python -m bench.store_turn [DATABASE_URL] [--turns 300]      # default: SQLite in a temp dir
(cd OLD_TREE && PYTHONPATH=. python -m bench.store_turn)
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from typing import Any

from proxy.store import Store
from proxy.store.digest import hash_messages
from proxy.testing.records import finish_turn, new_request

RECORD: list[float] = []  # wall seconds of each record_request: what the upstream call waits for


def turn(store: Store, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    new = new_request(
        "bench",
        messages,
        request={"model": "m", "temperature": 0.1},
        tokens_original=100,
        tokens_compiled=100,
        pipeline=["a"],
        hashes=hash_messages(messages),
    )
    start = time.perf_counter()
    ref = store.record_request(new)
    RECORD.append(time.perf_counter() - start)
    answer = {"role": "assistant", "content": f"answer {len(messages)}"}
    finish_turn(store, ref, answer, usage={"prompt_tokens": 10, "completion_tokens": 2})
    return [*messages, answer, {"role": "user", "content": f"next {len(messages)}"}]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("url", nargs="?", help="database URL (default: SQLite in a temp dir)")
    ap.add_argument("--turns", type=int, default=300)
    args = ap.parse_args()
    store = Store(args.url or f"sqlite:///{tempfile.mkdtemp()}/store.db")
    store.upgrade()
    messages = [
        {"role": "system", "content": "You are helpful."},
        {"role": "user", "content": f"task {os.getpid()} {time.time()}"},
    ]
    try:
        for _ in range(20):
            messages = turn(store, messages)
        wall, cpu = time.perf_counter(), time.process_time()
        RECORD.clear()
        for _ in range(args.turns):
            messages = turn(store, messages)
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    finally:
        store.close()
    n = args.turns
    print(f"store, continuing turn: wall {wall / n * 1000:.3f} ms, CPU {cpu / n * 1000:.3f} ms")
    print(f"of which record_request: wall p50 {statistics.median(RECORD) * 1000:.3f} ms")


if __name__ == "__main__":
    main()
