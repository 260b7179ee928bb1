"""CPU per request, the figure a busy machine disturbs least: ctxproxy serve (SQLite, no
compaction) and, with --before, an older tree beside it, each sent the same continuing turns
back to back on one connection; the server process's CPU time (all its threads) per request,
in the best block (other load only adds to it) and the median one, and the wall-clock p50
beside it. Blocks alternate between the targets.

python -m bench.turn_cpu [--before DIR] [--requests 300]
       [--profiles claude codex 8k tiny growth-20 growth-2000]   # growth-*: not by default
       [--spy claude]   # also sample ctxproxy with py-spy (pip install py-spy) during that profile
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

import psutil

from bench import loadgen, overhead_agents, peer_proxies, spawn, tabulate
from bench import overhead as o
from proxy.testing import histories

PROFILES = ("claude", "codex", "8k", "tiny", "growth-20", "growth-2000")
# Issue 31's growth figure: the overhead benchmark's session at its first and last size.
GROWTH = {"growth-20": (20, 2_085), "growth-2000": (2_000, 214_000)}
Spans = dict[str, list[float]]


def workload(profile: str) -> tuple[Any, str]:
    if profile in ("8k", "tiny", *GROWTH):
        messages, tokens = (o.SIZES | o.TINY | GROWTH)[profile]
        load = o.Workload("continuing", histories.history_for_tokens(messages, tokens))
        return load, "/v1/chat/completions"
    return overhead_agents.AgentLoad(profile), overhead_agents.agents.PATHS[profile]


def cpu_seconds(pid: int) -> float:
    t = psutil.Process(pid).cpu_times()
    return t.user + t.system


async def block(t: loadgen.Target, load: Any, n: int) -> tuple[float, list[float], Spans]:
    """(server CPU seconds per request, wall-clock seconds of each request, its Server-Timing
    spans in ms)."""
    base = load.base()
    await o.prime(t, base)
    template = t.request(load.turn(base))
    pid = t.server.proc.pid if t.server.proc else 0
    conn, times, spans = loadgen.Conn(t.server.port), [], {}
    try:
        before = cpu_seconds(pid)
        for _ in range(n):
            status, _, total, body = await conn.send(o.variant(template))
            if status != 200:
                raise loadgen.BenchError(f"HTTP {status}: {body[:300]!r}")
            times.append(total)
            for part in conn.headers.get(b"server-timing", b"").decode().split(","):
                name, _, dur = part.strip().partition(";dur=")
                if dur:
                    spans.setdefault(name, []).append(float(dur))
        per = (cpu_seconds(pid) - before) / n
    finally:
        await conn.close()
    return per, times, spans


def spy(pid: int, seconds: float, out: Path) -> subprocess.Popen:
    exe = str(Path(sys.executable).with_name("py-spy"))
    argv = [exe, "record", "-p", str(pid), "-f", "raw", "-o", str(out), "-r", "250", "--gil"]
    return subprocess.Popen([*argv, "-d", str(max(1, int(seconds)))], stdout=subprocess.DEVNULL)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.turn_cpu", description=__doc__)
    ap.add_argument("--before", type=Path, help="an older tree to run beside (as-is)")
    ap.add_argument(
        "--peers",
        nargs="+",
        default=[],
        choices=[p.name for p in peer_proxies.PEERS],
        help="peer proxies to run beside (chat profiles only; installed by bench.overhead --setup)",
    )
    ap.add_argument(
        "--postgres",
        metavar="ADMIN_URL",
        help="also run ctxproxy (and --before) on PostgreSQL, as 'ctxproxy-pg' ('before-pg'), "
        "each in a fresh database made beside this one",
    )
    ap.add_argument("--profiles", nargs="+", choices=PROFILES, default=list(PROFILES[:4]))
    ap.add_argument("--requests", type=int, default=100, help="per block")
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--spy", choices=PROFILES, help="py-spy ctxproxy during this profile")
    ap.add_argument("--out", type=Path, default=Path("spy.txt"), help="py-spy's raw stacks")
    args = ap.parse_args(argv)
    wd = tabulate.workdir("ctxproxy-bench-cpu-")
    servers = [spawn.start_upstream(wd)]
    cleanup: list[Any] = []
    try:
        servers.append(spawn.start_ctxproxy(wd, servers[0]))
        targets = [loadgen.Target("ctxproxy", servers[1])]
        if args.postgres:
            targets.append(o.start_on_postgres(args.postgres, wd, servers[0], servers, cleanup))
        if args.before:
            servers.append(o.start_before(args.before, wd, servers[0], as_is=True))
            targets.append(loadgen.Target("before", servers[-1]))
        if args.before and args.postgres:
            from bench.overhead_agents import create_database

            url, drop = create_database(args.postgres)
            cleanup.append(drop)
            (wd / "pg-before").mkdir()
            old = o.start_before(args.before, wd / "pg-before", servers[0], True, url)
            servers.append(old)
            targets.append(loadgen.Target("before-pg", old))
        for peer in peer_proxies.pick(args.peers):
            servers.append(peer_proxies.start_peer(peer, wd, servers[0]))
            targets.append(loadgen.Target(peer.name, servers[-1], peer_proxies.headers(peer)))
        for s in servers:
            if s.error:
                raise RuntimeError(s.error)
        rows = []
        for profile in args.profiles:
            load, path = workload(profile)
            cpu: dict[str, list[float]] = {}
            wall: dict[str, list[float]] = {}
            timing: dict[str, Spans] = {}
            for r in range(args.rounds):
                order = targets if r % 2 == 0 else targets[::-1]
                for t in order:
                    if t.name in args.peers and path != "/v1/chat/completions":
                        continue
                    t = loadgen.Target(t.name, t.server, t.headers, path)
                    watch = None
                    if args.spy == profile and t.name == "ctxproxy" and r == 0 and t.server.proc:
                        watch = spy(t.server.proc.pid, args.requests * 0.02, args.out)
                    per, times, spans = asyncio.run(block(t, load, args.requests))
                    if watch is not None:
                        watch.wait()
                    cpu.setdefault(t.name, []).append(per)
                    wall.setdefault(t.name, []).extend(times)
                    for k, v in spans.items():
                        timing.setdefault(t.name, {}).setdefault(k, []).extend(v)
            for name in cpu:
                per = sorted(cpu[name])
                best, middle = per[0] * 1000, statistics.median(per) * 1000
                p50 = statistics.median(wall[name]) * 1000
                spans = timing.get(name, {})
                said = [f"{k} {statistics.median(v):.1f}" for k, v in spans.items()]
                rows.append(
                    [profile, name, f"{best:.2f}", f"{middle:.2f}", f"{p50:.2f}", " ".join(said)]
                )
        head = ["profile", "target", "server CPU ms/req, best block", "median block", "p50 ms"]
        print(tabulate.table([*head, "Server-Timing p50s, ms"], rows))
    finally:
        for s in reversed(servers):
            s.stop()
        for done in cleanup:
            done()
    return 0


if __name__ == "__main__":
    sys.exit(main())
