"""Slowloris: half-sent request heads against ctxproxy, without and with its slow-client guard.

Each run starts a server with 4,096 file descriptors (a common default), opens `--heads`
connections that send a request head a line at a time (one line every 5 s, never the blank line
that ends it), and probes /healthz four times a second on fresh connections while they hang.
"before" is the app under plain uvicorn (what `serve` ran before); "after" is `ctxproxy serve`
(proxy/http/slow.py: a head deadline, a body deadline, a connection cap that makes room).

Run from the repository root: python -m bench.slowloris [--heads 3000] [--seconds 40]
"""

from __future__ import annotations

import argparse
import asyncio
import resource
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from bench import spawn, tabulate

PORTS = (22100, 22101)  # before, after (this helper's range)
NOFILE = 4096
LINE_EVERY_S = 5.0
PROBE_EVERY_S = 0.25
PROBE_TIMEOUT_S = 2.0


@dataclass
class Attack:
    opened: int = 0
    refused: int = 0  # connections the server never accepted (or reset at once)
    closed_after: list[float] = field(default_factory=list)  # seconds from open to close
    probes: list[bool] = field(default_factory=list)
    probe_s: list[float] = field(default_factory=list)  # the answered probes' round trips
    after_probes: list[bool] = field(default_factory=list)  # right after the attack


async def hang(port: int, attack: Attack, until: float) -> None:
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
    except OSError:
        attack.refused += 1
        return
    attack.opened += 1
    opened = time.monotonic()
    lines = [b"POST /v1/chat/completions HTTP/1.1\r\n", b"Host: 127.0.0.1\r\n"]
    lines += [b"X-Slow-%d: a\r\n" % i for i in range(100)]
    try:
        for line in lines:
            writer.write(line)
            try:
                if await asyncio.wait_for(reader.read(1), LINE_EVERY_S) == b"":
                    attack.closed_after.append(time.monotonic() - opened)
                    return
            except TimeoutError:
                pass
            if time.monotonic() > until:
                return
    except (ConnectionError, OSError):
        attack.closed_after.append(time.monotonic() - opened)
    finally:
        writer.close()


async def probe(port: int) -> bool:
    try:
        reader, writer = await asyncio.wait_for(
            asyncio.open_connection("127.0.0.1", port), PROBE_TIMEOUT_S
        )
    except (OSError, TimeoutError):
        return False
    try:
        writer.write(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        answer = await asyncio.wait_for(reader.read(), PROBE_TIMEOUT_S)
        return answer.startswith(b"HTTP/1.1 200")
    except (OSError, TimeoutError):
        return False
    finally:
        writer.close()


async def attack(port: int, heads: int, seconds: float) -> Attack:
    result = Attack()
    started = time.monotonic()
    until = started + seconds

    async def probes() -> None:
        await asyncio.sleep(2.0)  # the first heads are open
        while time.monotonic() < until:
            sent = time.monotonic()
            result.probes.append(await probe(port))
            if result.probes[-1]:
                result.probe_s.append(time.monotonic() - sent)
            await asyncio.sleep(PROBE_EVERY_S)

    prober = asyncio.create_task(probes())
    tasks: list[asyncio.Task[None]] = []
    for start in range(0, heads, 200):  # open them as fast as the loop lets, in batches
        batch = range(start, min(start + 200, heads))
        tasks += [asyncio.create_task(hang(port, result, until)) for _ in batch]
        await asyncio.sleep(0.05)
    await prober
    await asyncio.gather(*tasks, return_exceptions=True)
    for _ in range(8):
        result.after_probes.append(await probe(port))
        await asyncio.sleep(PROBE_EVERY_S)
    return result


def config(workdir: Path) -> Path:
    cfg = workdir / "ctxproxy.yaml"
    cfg.write_text(
        f"database_url: sqlite:///{workdir / 'ctxproxy.db'}\n"
        "upstreams: [{name: none, base_url: 'http://127.0.0.1:22999/v1', context_window: 8000}]\n"
        "log_level: warning\n"
    )
    return cfg


def serve_plain(cfg: str, port: int) -> None:
    """The app under uvicorn's own protocol: what `serve` ran before the guard."""
    import uvicorn

    from proxy.app import create_app
    from proxy.settings import load_settings

    uvicorn.run(create_app(load_settings(cfg)), port=port, log_level="warning")


def run(name: str, argv: list[str], port: int, args: argparse.Namespace, workdir: Path) -> Attack:
    limited = ["prlimit", f"--nofile={NOFILE}:{NOFILE}", "--", *argv]
    env = {"PYTHONPATH": str(tabulate.ROOT.parent)}
    server = spawn.start(name, limited, port, "/healthz", workdir, env=env)
    if server.error:
        raise RuntimeError(server.error)
    try:
        return asyncio.run(attack(port, args.heads, args.seconds))
    finally:
        server.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--heads", type=int, default=3000)
    parser.add_argument("--seconds", type=float, default=40.0)
    parser.add_argument("--serve-plain", nargs=2, metavar=("CONFIG", "PORT"))
    args = parser.parse_args()
    if args.serve_plain:
        serve_plain(args.serve_plain[0], int(args.serve_plain[1]))
        return
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)  # this side holds every head too
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    workdir = tabulate.workdir("slowloris")
    cfg = str(config(workdir))
    plain = [sys.executable, "-m", "bench.slowloris", "--serve-plain", cfg, str(PORTS[0])]
    guarded = [spawn.CTXPROXY, "serve", "--config", cfg, "--port", str(PORTS[1])]
    results = {
        "before": run("before", plain, PORTS[0], args, workdir),
        "after": run("after", guarded, PORTS[1], args, workdir),
    }
    print(tabulate.machine())
    every = f"a line every {LINE_EVERY_S:.0f} s"
    print(f"{args.heads} half-sent heads ({every}), {args.seconds:.0f} s;")
    print(f"server with {NOFILE} file descriptors; /healthz probed every {PROBE_EVERY_S} s\n")
    rows = [[figure, *(cell(results[k]) for k in results)] for figure, cell in FIGURES]
    print(tabulate.table(["figure", *results], rows))


def _share(xs: list[bool]) -> str:
    return f"{sum(xs)}/{len(xs)} ({100 * sum(xs) / max(len(xs), 1):.0f}%)"


def _closed(a: Attack) -> str:
    if not a.closed_after:
        return "none"
    return f"{len(a.closed_after)}, median {tabulate.median(a.closed_after):.1f} s"


FIGURES = [
    ("heads opened", lambda a: str(a.opened)),
    ("heads refused at connect", lambda a: str(a.refused)),
    ("heads closed by the server", _closed),
    ("longest a closed head hung", lambda a: f"{max(a.closed_after, default=0):.1f} s"),
    ("/healthz during the attack", lambda a: _share(a.probes)),
    ("/healthz answer, median", lambda a: f"{1000 * tabulate.median(a.probe_s):.0f} ms"),
    ("/healthz right after", lambda a: _share(a.after_probes)),
]


if __name__ == "__main__":
    main()
