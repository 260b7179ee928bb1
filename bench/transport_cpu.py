"""CPU time per request of each upstream HTTP client (proxy/upstream/pools.py's `client_for`), sent
and read by proxy/upstream/send.py as the proxy does, against the raw upstream in another process:
what the proxy pays per request.

`<name>` goes through httpx's client over that transport; `aiohttp-direct` is the proxy's own path
(send.py calls aiohttp's pool without httpx's client in between); `aiohttp-alone` is aiohttp's
client by itself, no checks, for the floor.

    python -m bench.transport_cpu --clients aiohttp aiohttp-direct aiohttp-alone httpx --rounds 5
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import subprocess
import sys
import time

import aiohttp
import httpx

from proxy.settings import Upstream
from proxy.upstream import send as up
from proxy.upstream.pools import UpstreamClient, UpstreamPools, client_for

SERVE = (
    "import sys, time; from proxy.testing.rawupstream import RawUpstream\n"
    "with RawUpstream(int(sys.argv[1])) as u:\n"
    "    print(u.url, flush=True)\n    time.sleep(10**6)\n"
)
BODY = {"model": "raw-echo", "messages": [{"role": "user", "content": "x" * 35_000}]}


async def one_round(name: str, url: str, requests: int, concurrency: int) -> float:
    """CPU µs per request for `requests` requests, `concurrency` at a time, after a warm-up."""
    if name == "aiohttp-alone":
        return await alone(url, requests, concurrency)
    upstream = Upstream(name="raw", base_url=url, max_connections=64)
    if name == "aiohttp-direct":
        client: httpx.AsyncClient = UpstreamClient(UpstreamPools([upstream]))
    else:
        limits = httpx.Limits(max_connections=64, max_keepalive_connections=64)
        client = httpx.AsyncClient(transport=client_for(name)(limits))
    async with client:

        async def worker(n: int) -> None:
            for _ in range(n):
                r = await up.ask(client, upstream, "/chat/completions", BODY, window=None)
                await up.read(r, upstream)
                assert r.status_code == 200

        await asyncio.gather(*(worker(2) for _ in range(concurrency)))
        start = time.process_time()
        await asyncio.gather(*(worker(requests // concurrency) for _ in range(concurrency)))
        return (time.process_time() - start) / (requests // concurrency * concurrency) * 1e6


async def alone(url: str, requests: int, concurrency: int) -> float:
    connector = aiohttp.TCPConnector(limit=64)
    async with aiohttp.ClientSession(connector=connector) as session:

        async def worker(n: int) -> None:
            for _ in range(n):
                body = up.encode_json(BODY)
                headers = {"content-type": "application/json"}
                async with session.post(url + "/chat/completions", data=body, headers=headers) as r:
                    await r.read()
                    assert r.status == 200

        await asyncio.gather(*(worker(2) for _ in range(concurrency)))
        start = time.process_time()
        await asyncio.gather(*(worker(requests // concurrency) for _ in range(concurrency)))
        return (time.process_time() - start) / (requests // concurrency * concurrency) * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument(
        "--clients", nargs="+", default=["aiohttp", "aiohttp-direct", "aiohttp-alone", "httpx"]
    )
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--requests", type=int, default=800)
    ap.add_argument("--concurrency", type=int, nargs="+", default=[16, 1])
    ap.add_argument("--port", type=int, default=0, help="the raw upstream's port (0: any free)")
    args = ap.parse_args()
    argv = [sys.executable, "-c", SERVE, str(args.port)]
    server = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
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
