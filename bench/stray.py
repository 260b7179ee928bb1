"""Stray bytes: an upstream that, half the time, sends an unsolicited copy of its answer on the same
keep-alive connection a moment later. Clients through ctxproxy each check that their answer carries
their own request's marker: a wrong answer is another request's answer reaching a stranger.

    python -m bench.stray --seconds 15 [--before /path/to/older/tree] [--port 21100]

Prints, per target and number of clients: requests; copies the upstream sent, and how many of them
it wrote after the connection's next request had reached it (on a 2-core machine under load, an
upstream can be descheduled that long: no HTTP/1.1 client can tell such a copy from the answer to
the request it has just sent, so these bound the wrong answers a keep-alive client cannot avoid);
wrong answers; 502s (a copy that reached the proxy before it had handed on the answer it follows:
bytes past that answer's end, refused as malformed) and requests/s.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import subprocess
import sys
import time
from pathlib import Path

import httpx

from bench import spawn, tabulate
from bench.overhead import start_before

SERVE = (
    "import sys, time; from proxy.testing.rawupstream import RawUpstream\n"
    "with RawUpstream(int(sys.argv[1])) as u:\n"
    "    print(u.port, flush=True)\n    time.sleep(10**6)\n"
)


async def client_loop(c: httpx.AsyncClient, url: str, n: int, stop: float) -> list[int]:
    done = wrong = errors = 0
    while time.monotonic() < stop:
        marker = f"client {n} request {done}"
        body = {"model": "spray", "messages": [{"role": "user", "content": marker}]}
        sid = {"X-Session-Id": f"stray-{n}-{done}"}
        r = await c.post(url + "/v1/chat/completions", json=body, headers=sid)
        done += 1
        if r.status_code != 200:
            errors += 1
            if r.status_code != 502:
                raise RuntimeError(f"not a 502 but {r.status_code}: {r.text[:300]}")
        elif (got := r.json()["choices"][0]["message"]["content"]) != f"echo: {marker}":
            wrong += 1
            print(f"  wrong: {marker!r} answered with {got[:80]!r}", flush=True)
    return [done, wrong, errors]


async def spray(url: str, clients: int, seconds: float) -> tuple[int, int, int, float]:
    """(requests, wrong answers, errors, requests/s) for `clients` clients over `seconds`."""
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    async with httpx.AsyncClient(timeout=30, limits=limits) as c:
        start = time.monotonic()
        results = await asyncio.gather(
            *(client_loop(c, url, n, start + seconds) for n in range(clients))
        )
        elapsed = time.monotonic() - start
    done, wrong, errors = (sum(x) for x in zip(*results, strict=True))
    return done, wrong, errors, done / elapsed


def stray_stats(upstream: spawn.Server) -> dict[str, int]:
    body = {"model": "stray-stats", "messages": []}
    r = httpx.post(upstream.url + "/v1/chat/completions", json=body, timeout=10)
    text = r.json()["choices"][0]["message"]["content"].removeprefix("echo: ")
    return dict(json.loads(text))


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.stray", description=__doc__)
    ap.add_argument("--seconds", type=float, default=15.0, help="per target and client count")
    ap.add_argument("--clients", type=int, nargs="+", default=[1, 4, 16])
    ap.add_argument("--before", type=Path, help="an older tree, run beside this one as 'before'")
    ap.add_argument("--port", type=int, default=0, help="first of the ports to use (0: any free)")
    args = ap.parse_args()
    if args.port:
        ports = itertools.count(args.port)
        spawn.free_port = lambda: next(ports)  # type: ignore[assignment]
    wd = tabulate.workdir("stray")
    raw = subprocess.Popen(
        [sys.executable, "-c", SERVE, str(spawn.free_port())], stdout=subprocess.PIPE, text=True
    )
    servers: list[spawn.Server] = []
    try:
        upstream = spawn.Server("raw", int(raw.stdout.readline()))  # type: ignore[union-attr]
        servers.append(spawn.start_ctxproxy(wd, upstream))
        if args.before:
            servers.append(start_before(args.before, wd, upstream))
        for s in servers:
            if s.error:
                raise RuntimeError(s.error)
        rows = []
        for clients in args.clients:
            for s in servers:  # one after the other at each client count
                was = stray_stats(upstream)
                done, wrong, errors, rate = asyncio.run(spray(s.url, clients, args.seconds))
                now = stray_stats(upstream)
                strays, late = (now[k] - was[k] for k in ("strays", "after_next"))
                name = "before" if s.name == "before" else "ctxproxy"
                row = [name, str(clients), f"{done:,}", f"{strays:,}", str(late), str(wrong)]
                row += [str(errors), f"{rate:,.0f}"]
                rows.append(row)
                print("  ".join(row), flush=True)
        print(f"\nstray copies half the time, {args.seconds:g} s each; {tabulate.machine()}")
        head = ["target", "clients", "requests", "copies", "copies after next request"]
        head += ["wrong answers", "502s", "requests/s"]
        print(tabulate.table(head, rows))
    finally:
        for s in servers:
            s.stop()
        raw.terminate()
        raw.wait()


if __name__ == "__main__":
    main()
