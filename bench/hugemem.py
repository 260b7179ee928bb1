"""Whether `ctxproxy serve` gives memory back after huge requests: RSS before, at its peak, and
over a minute of idle after one ~30 MB body and one 100,000-message request (the goal: back
within 50 MB of before within 60 s). Run from the repository root:
python -m bench.hugemem [--mb 30 --messages 100000 --idle 60]
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import orjson

from bench import soak, spawn, stub, tabulate
from bench.overhead import rss_mb

WORDS = [f"w{i:x}" for i in range(4096)]


def text(rng: random.Random, chars: int) -> str:
    out = " ".join(rng.choices(WORDS, k=chars // 5))
    return out[:chars]


def big_body(mb: int) -> bytes:
    """A chat request of about `mb` MB: an agent history of 100 KB tool outputs."""
    rng = random.Random(1)
    messages: list[dict[str, Any]] = soak.session_start(999)
    while sum(len(str(m["content"] or "")) for m in messages) < mb << 20:
        messages.append({"role": "user", "content": text(rng, 100_000)})
        messages.append({"role": "assistant", "content": text(rng, 200)})
    messages.append({"role": "user", "content": "go on"})
    return orjson.dumps({"model": stub.MODEL, "messages": messages})


def many_body(n: int) -> bytes:
    """A chat request of `n` short messages."""
    messages = soak.session_start(998)
    for i in range(n):
        messages.append({"role": "user" if i % 2 else "assistant", "content": f"note {i}"})
    messages.append({"role": "user", "content": "go on"})
    return orjson.dumps({"model": stub.MODEL, "messages": messages})


def post(url: str, body: bytes) -> int:
    r = httpx.post(
        f"{url}/v1/chat/completions",
        content=body,
        headers={"content-type": "application/json"},
        timeout=600,
    )
    return r.status_code


def run(proxy: spawn.Server, mb: int, n: int, idle: float) -> dict[str, Any]:
    assert proxy.proc is not None
    pid = proxy.proc.pid
    for i in range(20):  # warm: the modules and caches a normal turn touches
        post(proxy.url, soak_body(i))
    before = rss_mb(pid)
    peak, t0, statuses = before, time.monotonic(), []
    for body in (big_body(mb), many_body(n)):
        statuses.append(post(proxy.url, body))
        peak = max(peak, rss_mb(pid))
    sent = time.monotonic()
    samples = [(0.0, rss_mb(pid))]
    while time.monotonic() - sent < idle:
        time.sleep(1)
        samples.append((time.monotonic() - sent, rss_mb(pid)))
        peak = max(peak, samples[-1][1])
    return {
        "statuses": statuses,
        "requests_seconds": sent - t0,
        "rss_before_mb": before,
        "rss_peak_mb": peak,
        "rss_after_idle_mb": samples[-1][1],
        "idle_s": idle,
        "samples": samples,
    }


def soak_body(i: int) -> bytes:
    messages = soak.session_start(i)
    for n in range(10):
        messages += soak.step(i, n)
    return orjson.dumps({"model": stub.MODEL, "messages": messages})


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.hugemem", description=__doc__)
    ap.add_argument("--mb", type=int, default=30, help="the big body's size")
    ap.add_argument("--messages", type=int, default=100_000, help="the long request's messages")
    ap.add_argument("--idle", type=float, default=60, help="seconds to watch after")
    ap.add_argument("--window", type=int, default=4096)
    ap.add_argument("--out", type=Path, default=tabulate.RESULTS, help="results folder")
    ap.add_argument("--name", default="hugemem")
    args = ap.parse_args(argv)
    wd = tabulate.workdir("ctxproxy-bench-hugemem-")
    servers: list[spawn.Server] = []
    try:
        upstream = spawn.start_upstream(wd)
        servers.append(upstream)
        proxy = spawn.start_ctxproxy(wd, upstream, window=args.window)
        servers.append(proxy)
        if proxy.error:
            raise RuntimeError(proxy.error)
        result = run(proxy, args.mb, args.messages, args.idle)
    finally:
        for s in reversed(servers):
            s.stop()
    print(
        f"HTTP {result['statuses']} in {result['requests_seconds']:.0f} s; RSS "
        f"{result['rss_before_mb']:.0f} MiB before → {result['rss_peak_mb']:.0f} peak → "
        f"{result['rss_after_idle_mb']:.0f} after {args.idle:.0f} s idle "
        f"({result['rss_after_idle_mb'] - result['rss_before_mb']:+.0f} MiB)"
    )
    print(f"wrote {tabulate.write_json(args.name, result, args.out)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
