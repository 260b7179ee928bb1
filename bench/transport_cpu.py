"""CPU time per request of each upstream HTTP client (proxy/upstream/pools.py's `client_for`), alone
under an httpx client, against the raw upstream in another process: what the proxy pays per request.

    python -m bench.transport_cpu --clients httpx aiohttp aiohttp-keepalive --rounds 5
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import subprocess
import sys
import time

import httpx

from proxy.upstream.pools import client_for

SERVE = (
    "import time; from proxy.testing.rawupstream import RawUpstream\n"
    "with RawUpstream() as u:\n    print(u.url, flush=True)\n    time.sleep(10**6)\n"
)
BODY = {"model": "raw-echo", "messages": [{"role": "user", "content": "x" * 35_000}]}


async def one_round(name: str, url: str, requests: int, concurrency: int) -> float:
    """CPU µs per request for `requests` requests, `concurrency` at a time, after a warm-up."""
    limits = httpx.Limits(max_connections=64, max_keepalive_connections=64)
    transport = client_for(name)(limits)
    async with httpx.AsyncClient(transport=transport, timeout=30) as client:

        async def worker(n: int) -> None:
            for _ in range(n):
                r = await client.post(url + "/chat/completions", json=BODY)
                r.raise_for_status()

        await asyncio.gather(*(worker(2) for _ in range(concurrency)))
        start = time.process_time()
        await asyncio.gather(*(worker(requests // concurrency) for _ in range(concurrency)))
        return (time.process_time() - start) / (requests // concurrency * concurrency) * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--clients", nargs="+", default=["httpx", "aiohttp", "aiohttp-keepalive"])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--requests", type=int, default=800)
    ap.add_argument("--concurrency", type=int, nargs="+", default=[16, 1])
    args = ap.parse_args()
    server = subprocess.Popen([sys.executable, "-c", SERVE], stdout=subprocess.PIPE, text=True)
    try:
        url = server.stdout.readline().strip()  # type: ignore[union-attr]
        for conc in args.concurrency:
            results: dict[str, list[float]] = {n: [] for n in args.clients}
            for _ in range(args.rounds):  # interleaved, so load changes hit every client alike
                for name in args.clients:
                    results[name].append(asyncio.run(one_round(name, url, args.requests, conc)))
            for name, xs in results.items():
                print(
                    f"{conc:>3} concurrent  {name:<18} {statistics.median(xs):>7,.0f} µs "
                    f"[{min(xs):,.0f}–{max(xs):,.0f}]"
                )
    finally:
        server.terminate()
        server.wait()


if __name__ == "__main__":
    main()
