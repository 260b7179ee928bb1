"""RSS of `ctxproxy serve` under sustained load: N agent sessions × T turns at a small window.

Each session is an agent loop (tool call, tool output) that grows by two messages a turn, so
every turn past the first few is compacted; N sessions run at once, and each, after T turns,
is followed by a new one until R requests are done. The proxy process's RSS is sampled every
half second; the figure that matters is its growth over the second half of the requests (it
should level off), from the median level around half-way to the median level at the end.
Writes bench/results/soak.json and soak.png. Run from the repository root:
python -m bench.soak [--sessions 32 --turns 200 --requests 2000 --window 4096]
(the quick default; --requests 6400 is the 32 × 200 shape, 20000 shows the plateau).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path
from typing import Any

from bench import loadgen, spawn, stub, tabulate
from bench.overhead import LAUNCH_AS_IS, rss_mb
from proxy.testing import histories

IDLE_S = 5.0  # s after the last answer: RSS with no request in flight


def session_start(session: int) -> list[dict[str, Any]]:
    """Session `session`'s first request: its own task."""
    return [
        {"role": "system", "content": histories.SESSION_SYSTEM},
        {"role": "user", "content": f"{histories.SESSION_TASK} (session {session})"},
    ]


def step(session: int, n: int) -> list[dict[str, Any]]:
    """The two messages turn n adds: each session's outputs are its own."""
    k = session * 100_000 + n
    return [histories.assistant_step(k), histories.tool_step(k)]


async def send(conn: loadgen.Conn, request: bytes) -> tuple[int, float, bytes]:
    """(status, seconds, body); once more on a new connection if the server closed an idle one."""
    for attempt in (1, 2):
        try:
            status, _, total, out = await conn.send(request)
            return status, total, out
        except (asyncio.IncompleteReadError, ConnectionError):
            await conn.close()
            if attempt == 2:
                raise
    raise AssertionError("unreachable")


async def drive(
    target: loadgen.Target, sessions: int, turns: int, requests: int, done: list[int]
) -> tuple[float, list[str]]:
    """`sessions` slots at once, each running sessions of `turns` turns back to back until
    `requests` are done in all; the median ms per turn, and the errors. A failed turn is noted
    and the session goes on (what is measured is memory; a long run is not thrown away for an
    upstream hiccup), unless more than 1% of the turns fail."""
    latencies: list[float] = []
    errors: list[str] = []

    async def one(slot: int) -> None:
        conn = loadgen.Conn(target.server.port)
        share = requests // sessions + (slot < requests % sessions)
        session, turn, messages = slot, 0, session_start(slot)
        try:
            for _ in range(share):
                if turn == turns:  # this session is over: a new one in its slot
                    session, turn = session + sessions, 0
                    messages = session_start(session)
                body = {"model": stub.MODEL, "messages": messages}
                status, total, out = await send(conn, target.request(body))
                if status != 200:
                    errors.append(f"HTTP {status}: {out[:300]!r}")
                    if len(errors) > requests // 100:
                        raise loadgen.BenchError(errors[0])
                latencies.append(total * 1000)
                done[0] += 1
                messages = [*messages, *step(session, turn)]
                turn += 1
        finally:
            await conn.close()

    await asyncio.gather(*(one(s) for s in range(sessions)))
    return tabulate.median(latencies), errors


async def sample(pid: int, done: list[int], out: list[tuple[float, int, float]]) -> None:
    t0 = time.monotonic()
    while True:
        out.append((time.monotonic() - t0, done[0], rss_mb(pid)))
        await asyncio.sleep(0.5)


async def soak(target: loadgen.Target, sessions: int, turns: int, requests: int) -> dict[str, Any]:
    assert target.server.proc is not None
    done = [0]
    samples: list[tuple[float, int, float]] = []
    sampler = asyncio.create_task(sample(target.server.proc.pid, done, samples))
    started = time.monotonic()
    try:
        p50, errors = await drive(target, sessions, turns, requests, done)
    finally:
        sampler.cancel()
    samples.append((time.monotonic() - started, done[0], rss_mb(target.server.proc.pid)))
    # Once nothing is in flight: what the process keeps, apart from the requests' working set.
    await asyncio.sleep(IDLE_S)
    idle = rss_mb(target.server.proc.pid)
    half, end = levels(samples, requests)
    return {
        "sessions": sessions,
        "turns": turns,
        "requests": requests,
        "seconds": time.monotonic() - started,
        "p50_ms": p50,
        "errors": errors,
        "rss_start_mb": samples[0][2],
        "rss_half_mb": half,
        "rss_end_mb": end,
        "second_half_growth_pct": (end - half) / half * 100,
        # one sample at each end, as this bench judged before
        "second_half_growth_pct_samples": growth_of_samples(samples, requests),
        "rss_idle_mb": idle,
        "samples": samples,
    }


LEVEL_SHARE = 0.05  # each level: the median RSS over this share of the requests, either side


def levels(samples: list[tuple[float, int, float]], requests: int) -> tuple[float, float]:
    """RSS at half-way and at the end, each the median of the samples over a window of the
    requests (a tenth of them) rather than one sample, which a request in flight can move."""
    width = max(int(requests * LEVEL_SHARE), 1)
    mid = [r for _, n, r in samples if abs(n - requests // 2) <= width]
    last = [r for _, n, r in samples if n >= requests - 2 * width]
    mid = mid or [next(r for _, n, r in samples if n >= requests // 2)]  # a run too short
    return tabulate.median(mid), tabulate.median(last or [samples[-1][2]])


def growth_of_samples(samples: list[tuple[float, int, float]], requests: int) -> float:
    half = next(rss for _, n, rss in samples if n >= requests // 2)
    return (samples[-1][2] - half) / half * 100


def plot(result: dict[str, Any], out: Path) -> Path:
    plt = tabulate.pyplot()
    fig, ax = plt.subplots(figsize=(7, 3.6))
    xs = [n for _, n, _ in result["samples"]]
    ax.plot(xs, [r for _, _, r in result["samples"]], lw=1.5)
    ax.axvline(result["requests"] / 2, color="grey", ls=":", lw=1)
    ax.set_xlabel("requests done")
    ax.set_ylabel("RSS of ctxproxy serve (MiB)")
    ax.set_ylim(bottom=0)
    ax.set_title(
        f"{result['requests']:,} requests, {result['sessions']} sessions at once × "
        f"{result['turns']} turns at a {result['window']:,}-token window:\n"
        f"{result['second_half_growth_pct']:+.1f}% over the second half",
        fontsize=9,
    )
    return tabulate.save_plot(fig, result.get("name", "soak"), out)


def plot_runs(paths: list[Path], out: Path) -> Path:
    """Several soak results (JSON) on one chart, labelled by their file names."""
    plt = tabulate.pyplot()
    fig, ax = plt.subplots(figsize=(7, 3.6))
    for path in paths:
        result = json.loads(path.read_text())
        samples = [tuple(s) for s in result["samples"]]
        half, end = levels(samples, result["requests"])  # one basis, whatever wrote the file
        print(f"{path.stem}: {half:.1f} -> {end:.1f} MiB, {(end - half) / half * 100:+.1f}%")
        ax.plot(
            [n for _, n, _ in samples],
            [r for _, _, r in samples],
            lw=1.5,
            label=f"{path.stem}: {(end - half) / half * 100:+.1f}% over the second half",
        )
    ax.axvline(result["requests"] / 2, color="grey", ls=":", lw=1)
    ax.set_xlabel("requests done")
    ax.set_ylabel("RSS of ctxproxy serve (MiB)")
    ax.set_ylim(bottom=0)
    ax.legend(fontsize=8, loc="lower right")
    ax.set_title(
        f"{result['requests']:,} requests, {result['sessions']} sessions at once × "
        f"{result['turns']} turns at a {result['window']:,}-token window",
        fontsize=9,
    )
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    return out


def start_proxy(wd: Path, upstream: spawn.Server, window: int, tree: Path | None) -> spawn.Server:
    """`ctxproxy serve` of this tree, or of `tree` as it is."""
    if tree is None:
        return spawn.start_ctxproxy(wd, upstream, window=window)
    cfg, port = spawn.ctxproxy_config(wd, upstream, window), spawn.free_port()
    argv = [sys.executable, "-c", LAUNCH_AS_IS, "serve", "--config", str(cfg), "--port", str(port)]
    return spawn.start("ctxproxy", argv, port, "/healthz", wd, {"PYTHONPATH": str(tree.resolve())})


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.soak", description=__doc__)
    ap.add_argument("--sessions", type=int, default=32)
    ap.add_argument("--turns", type=int, default=200, help="a session's turns")
    ap.add_argument("--requests", type=int, default=2000, help="in all (sessions restart)")
    ap.add_argument("--window", type=int, default=4096)
    ap.add_argument("--out", type=Path, default=tabulate.RESULTS, help="results folder")
    ap.add_argument("--name", default="soak", help="results file name")
    ap.add_argument("--tree", type=Path, help="serve an older tree (as-is) instead of this one")
    ap.add_argument(
        "--plot", nargs="+", type=Path, metavar="JSON", help="only plot these results together"
    )
    args = ap.parse_args(argv)
    if args.plot:
        print(f"wrote {plot_runs(args.plot, args.out / f'{args.name}.png')}")
        return 0
    wd = tabulate.workdir("ctxproxy-bench-soak-")
    servers: list[spawn.Server] = []
    try:
        upstream = spawn.start_upstream(wd)
        servers.append(upstream)
        proxy = start_proxy(wd, upstream, args.window, args.tree)
        servers.append(proxy)
        if proxy.error:
            raise RuntimeError(proxy.error)
        target = loadgen.Target("ctxproxy", proxy)
        result = asyncio.run(soak(target, args.sessions, args.turns, args.requests))
    finally:
        for s in reversed(servers):
            s.stop()
    result |= {
        "window": args.window,
        "name": args.name,
        "date": tabulate.now(),
        "machine": tabulate.machine(),
    }
    print(
        f"{args.requests:,} requests, {args.sessions} sessions at once × {args.turns} turns at a "
        f"{args.window:,}-token window, "
        f"{result['seconds']:.0f} s, p50 {result['p50_ms']:.1f} ms per turn; RSS "
        f"{result['rss_start_mb']:.0f} → {result['rss_half_mb']:.0f} MiB at half-way → "
        f"{result['rss_end_mb']:.0f} MiB ({result['second_half_growth_pct']:+.1f}% over the "
        f"second half); {result['rss_idle_mb']:.0f} MiB {IDLE_S:.0f} s after the last answer"
    )
    for error in result["errors"]:
        print(f"failed turn: {error}")
    print(f"wrote {tabulate.write_json(args.name, result, args.out)} and {plot(result, args.out)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
