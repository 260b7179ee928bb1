"""Compile time for a 1,000-message, ~200k-token agent history: cold versus warm caches.

Cold: fresh TokenCounter, empty elision caches, no stored state (a session's first request).
Next turn: the previous turn (two messages shorter) was compiled and its state is handed back,
as the store does in a running proxy. Repeat: the same request again with its own state (a
retry). Every run gets a freshly parsed copy of the body, as a request would.
Run from the repository root: python -m bench.compile_bench [--quick]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time

from proxy.compile.tokens import TokenCounter
from proxy.compile.view import Compiled, compile_request
from proxy.settings import CompactionSettings
from strategies.elide import elide
from strategies.forms import _truncate
from strategies.state import ViewState

WORDS = "the of config test error value request file path module line return self data".split()
TRACE = (
    "Traceback (most recent call last):\n"
    '  File "/src/app/db.py", line 42, in connect\n'
    "    return engine(cfg.database_url)\n"
    "AttributeError: 'Config' object has no attribute 'database_url'"
)


WINDOWS = (262_144, 131_072, 65_536)


def output(rnd: random.Random, n: int) -> str:
    kind = rnd.random()
    if kind < 0.75:  # command output: a few dozen lines
        lines = [" ".join(rnd.choices(WORDS, k=8)) for _ in range(rnd.randint(5, 30))]
    elif kind < 0.9:  # a long log that ends in a traceback
        lines = [
            f"2024-05-14 10:{i % 60:02d} INFO db: attempt {i} to {rnd.choice(WORDS)}"
            for i in range(rnd.randint(30, 100))
        ] + [TRACE]
    else:  # a file dump
        lines = [f"    {rnd.choice(WORDS)} = {rnd.choice(WORDS)}({i}, {n})" for i in range(100)]
    return "\n".join(lines)


def history(seed: int = 1, steps: int = 499) -> list[dict]:
    rnd = random.Random(seed)
    msgs = [
        {"role": "system", "content": "You are a careful coding agent."},
        {"role": "user", "content": "Fix the failing database connection test."},
    ]
    for n in range(steps):
        cid = f"call_{n}"
        args = json.dumps({"cmd": f"pytest tests/test_db.py -k case_{n} -x"})
        msgs.append(
            {
                "role": "assistant",
                "content": f"Step {n}: checking {rnd.choice(WORDS)}.",
                "tool_calls": [
                    {
                        "id": cid,
                        "type": "function",
                        "function": {"name": "run_command", "arguments": args},
                    }
                ],
            }
        )
        msgs.append({"role": "tool", "tool_call_id": cid, "content": output(rnd, n)})
    return msgs


def timed(
    body: dict, counter: TokenCounter, window: int, prior: ViewState | None = None
) -> tuple[float, Compiled]:
    body = json.loads(json.dumps(body))  # every request arrives as new objects
    start = time.perf_counter()
    result = compile_request(
        body, window=window, settings=CompactionSettings(), counter=counter, prior=prior
    )
    return (time.perf_counter() - start) * 1000, result


def cold(body: dict, window: int) -> float:
    """Nothing cached: every message tokenized, every output scanned, no stored state."""
    elide.cache_clear()
    _truncate.cache_clear()
    return timed(body, TokenCounter(), window)[0]


def next_turn(body: dict, previous: dict, counter: TokenCounter, window: int) -> float:
    """A running proxy: the previous turn was compiled, this one adds a reply and its result."""
    _, before = timed(previous, counter, window)
    return timed(body, counter, window, before.state)[0]


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.compile_bench", description=__doc__)
    ap.add_argument("--quick", action="store_true", help="40 steps, one run, small windows")
    args = ap.parse_args(argv)
    runs, steps, windows = (1, 40, (16_384, 8_192, 4_096)) if args.quick else (7, 499, WINDOWS)
    msgs = history(steps=steps)
    body, previous = {"messages": msgs}, {"messages": msgs[:-2]}
    total = TokenCounter().count_messages(msgs)
    print(
        f"history: {len(msgs)} messages, {total:,} tokens (cl100k), "
        f"{len(json.dumps(msgs)):,} bytes of JSON; medians of {runs} runs"
    )
    print(
        f"{'window':>8}  {'tokens in -> out':<19} {'passes':<24} {'cold ms':>8} "
        f"{'next turn ms':>13} {'repeat ms':>10} {'cold/next':>9}"
    )
    for window in windows:
        counter = TokenCounter()
        c = statistics.median(cold(body, window) for _ in range(runs))
        n = statistics.median(next_turn(body, previous, counter, window) for _ in range(runs))
        _, res = timed(body, counter, window)
        r = statistics.median(timed(body, counter, window, res.state)[0] for _ in range(runs))
        io = f"{res.tokens_original:,} -> {res.tokens_compiled:,}"
        print(
            f"{window:>8}  {io:<19} {res.summary():<24} {c:>8.1f} {n:>13.1f} {r:>10.1f} "
            f"{c / n:>8.1f}x"
        )
    print("target: a warm compile (next turn) under 20 ms")


if __name__ == "__main__":
    main()
