"""Compile time for a 1,000-message, ~200k-token agent history: cold versus warm caches.

Cold: a fresh TokenCounter and empty elision cache (every message is tokenized and scanned).
Warm: the same counter as the previous turn, as in a running proxy; each run still gets a
freshly parsed copy of the body, as a request would. Run: python -m bench.compile_bench
"""

from __future__ import annotations

import json
import random
import statistics
import time

from proxy.compiler import compile_request
from proxy.settings import CompactionSettings
from proxy.tokens import TokenCounter
from strategies.elide import elide

WORDS = "the of config test error value request file path module line return self data".split()
TRACE = (
    "Traceback (most recent call last):\n"
    '  File "/src/app/db.py", line 42, in connect\n'
    "    return engine(cfg.database_url)\n"
    "AttributeError: 'Config' object has no attribute 'database_url'"
)


def output(rnd: random.Random, n: int) -> str:
    kind = rnd.random()
    if kind < 0.75:  # command output: a few dozen lines
        lines = [" ".join(rnd.choices(WORDS, k=8)) for _ in range(rnd.randint(5, 40))]
    elif kind < 0.9:  # a long log that ends in a traceback
        lines = [f"2024-05-14 10:{i % 60:02d} INFO db: attempt {i} to {rnd.choice(WORDS)}"
                 for i in range(rnd.randint(40, 120))] + [TRACE]
    else:  # a file dump
        lines = [f"    {rnd.choice(WORDS)} = {rnd.choice(WORDS)}({i}, {n})" for i in range(100)]
    return "\n".join(lines)


def history(seed: int = 1) -> list[dict]:
    rnd = random.Random(seed)
    msgs = [{"role": "system", "content": "You are a careful coding agent."},
            {"role": "user", "content": "Fix the failing database connection test."}]
    for n in range(499):
        cid = f"call_{n}"
        args = json.dumps({"cmd": f"pytest tests/test_db.py -k case_{n} -x"})
        msgs.append({"role": "assistant", "content": f"Step {n}: checking {rnd.choice(WORDS)}.",
                     "tool_calls": [{"id": cid, "type": "function",
                                     "function": {"name": "run_command", "arguments": args}}]})
        msgs.append({"role": "tool", "tool_call_id": cid, "content": output(rnd, n)})
    return msgs


def timed(body_json: str, counter: TokenCounter, window: int) -> tuple[float, object]:
    body = json.loads(body_json)  # every request arrives as new objects
    start = time.perf_counter()
    result = compile_request(body, window=window, settings=CompactionSettings(), counter=counter)
    return (time.perf_counter() - start) * 1000, result


def run(window: int, cold_runs: int = 5, warm_runs: int = 20) -> tuple[float, float, object]:
    body_json = json.dumps({"messages": history()})
    cold = []
    for _ in range(cold_runs):
        elide.cache_clear()
        cold.append(timed(body_json, TokenCounter(), window)[0])
    counter = TokenCounter()
    _, result = timed(body_json, counter, window)
    warm = [timed(body_json, counter, window)[0] for _ in range(warm_runs)]
    return statistics.median(cold), statistics.median(warm), result


def main() -> None:
    msgs = history()
    total = TokenCounter().count_messages(msgs)
    print(f"history: {len(msgs)} messages, {total:,} tokens (cl100k), "
          f"{len(json.dumps(msgs)):,} bytes of JSON")
    print(f"{'window':>8} {'figure':<34} {'cold ms':>9} {'warm ms':>9} {'ratio':>7}")
    for window in (262_144, 131_072, 65_536):
        cold, warm, result = run(window)
        figure = (f"{result.tokens_original:,}->{result.tokens_compiled:,} tok "
                  f"[{result.summary()}]")
        print(f"{window:>8} {figure:<34} {cold:>9.1f} {warm:>9.1f} {cold / warm:>6.1f}x")
    print("medians of 5 cold and 20 warm runs; target: warm < 20 ms")


if __name__ == "__main__":
    main()
