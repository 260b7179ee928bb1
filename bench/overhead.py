"""Overhead per request: ctxproxy beside peer proxies (LiteLLM, Headroom, context-guardian),
against direct calls.

One scripted upstream on loopback answers every request at once. Five measurements, in one run:

1. latency: added p50 (proxy - direct, paired per round) non-streaming and to the first
   streamed chunk, one client, for a continuing session and for a new session per request, at
   an 8k- and a 150k-token history; rounds rotate the order of the targets;
2. throughput: requests/s with 16 clients, each continuing its own session;
3. growth: ctxproxy's added time per turn in one session that grows from 20 to 2,000 messages;
4. stall: /healthz and another session's p99 while one client sends a 20,000-message request,
   then a 30 MB one;
5. memory: ctxproxy's RSS growth over 10,000 requests after warm-up.

Run from the repository root: python -m bench.overhead   (first run installs the peers)
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench import loadgen, peer_proxies, procmem, spawn, stub, tabulate
from proxy.testing import histories

SIZES = {"8k": (20, 8_000), "150k": (400, 150_000)}
TINY = {"tiny": (6, 400)}
KINDS = ("continuing", "new")
# A fixed-width mark in the serialised request, replaced by a counter before each send, so that
# every request is new to every proxy without re-encoding the body.
MARK = b"zq000000000000"
_COUNTER = itertools.count(1)
ANSWER = {"role": "assistant", "content": "".join(stub.WORDS_OUT)}  # what the upstream answers


@dataclass
class Plan:
    rounds: int = 3
    latency_n: int = 200  # requests per block (fewer if latency_s runs out)
    latency_s: float = 2.0
    throughput_s: float = 2.0
    clients: int = 16
    warmup: int = 10
    growth: tuple[int, ...] = (20, 50, 100, 200, 500, 1000, 2000)
    growth_tokens: int = 200_000  # at the last checkpoint
    growth_turns: int = 7  # timed turns at each checkpoint
    stall_messages: int = 20_000
    stall_bytes: int = 30_000_000
    rss_warmup: int = 1_000
    rss_requests: int = 10_000
    agent_steps: int = 20  # tool steps in an agent profile's stored session


FULL = Plan()
QUICK = Plan(
    rounds=1,
    latency_n=15,
    latency_s=0.5,
    throughput_s=0.3,
    warmup=2,
    growth=(20, 40, 80),
    growth_tokens=8_000,
    growth_turns=2,
    stall_messages=2_000,
    stall_bytes=2_000_000,
    rss_warmup=50,
    rss_requests=200,
    agent_steps=2,
)


def variant(template: bytes) -> bytes:
    return template.replace(MARK, b"zq%012d" % next(_COUNTER))


@dataclass
class Workload:
    """The requests of one history size and session kind, as templates with MARK in them."""

    kind: str
    messages: list[dict[str, Any]]

    def base(self) -> dict[str, Any]:
        """A continuing session's stored history: its own task, so its own session."""
        msgs = [dict(m) for m in self.messages]
        msgs[1] = {**msgs[1], "content": f"{msgs[1]['content']} (session {next(_COUNTER)})"}
        return {"model": stub.MODEL, "messages": msgs}

    def turn(self, base: dict[str, Any] | None) -> dict[str, Any]:
        """The timed request: the stored history plus the answer and one new user message
        (continuing), or the whole history under a new task (a new session)."""
        mark = MARK.decode()
        if self.kind == "continuing":
            assert base is not None
            nxt = {"role": "user", "content": f"Go on with the next check ({mark})."}
            return {**base, "messages": [*base["messages"], ANSWER, nxt]}
        msgs = list(self.messages)
        msgs[1] = {**msgs[1], "content": f"{msgs[1]['content']} (run {mark})"}
        return {"model": stub.MODEL, "messages": msgs}


async def prime(t: loadgen.Target, base: dict[str, Any]) -> None:
    conn = loadgen.Conn(t.server.port)
    try:
        status, _, _, body = await conn.send(t.request(base))
        if status != 200:
            raise loadgen.BenchError(f"HTTP {status}: {body[:300]!r}")
    finally:
        await conn.close()


async def timed(
    port: int, make: Callable[[], bytes], n: int, budget_s: float
) -> list[tuple[float, float]]:
    """Up to n sequential requests on one connection: (first byte, total) seconds."""
    conn, out = loadgen.Conn(port), []
    stop = time.perf_counter() + budget_s
    try:
        for _ in range(n):
            status, first, total, body = await conn.send(make())
            if status != 200:
                raise loadgen.BenchError(f"HTTP {status}: {body[:300]!r}")
            out.append((first, total))
            if time.perf_counter() > stop and len(out) >= 3:
                break
    finally:
        await conn.close()
    return out


async def latency_block(t: loadgen.Target, w: Workload, stream: bool, plan: Plan) -> list[float]:
    base = w.base() if w.kind == "continuing" else None
    if base is not None:
        await prime(t, base)
    body = w.turn(base) | ({"stream": True} if stream else {})
    template = t.request(body)
    got = await timed(t.server.port, lambda: variant(template), plan.latency_n, plan.latency_s)
    return [first if stream else total for first, total in got]


async def throughput(t: loadgen.Target, w: Workload, clients: int, seconds: float) -> float:
    """Requests/s with `clients` connections, each continuing its own session."""
    bases = [w.base() for _ in range(clients)]
    await asyncio.gather(*(prime(t, b) for b in bases))
    templates = [t.request(w.turn(b)) for b in bases]
    done, errors = 0, []
    stop = time.perf_counter() + seconds

    async def client(template: bytes) -> None:
        nonlocal done
        conn = loadgen.Conn(t.server.port)
        try:
            while time.perf_counter() < stop:
                status, _, _, body = await conn.send(variant(template))
                if status != 200:
                    errors.append(f"HTTP {status}: {body[:200]!r}")
                    return
                done += 1
        finally:
            await conn.close()

    start = time.perf_counter()
    await asyncio.gather(*(client(tp) for tp in templates))
    if errors:
        raise loadgen.BenchError(errors[0])
    return done / (time.perf_counter() - start)


# --- 1 + 2: latency and throughput, side by side -------------------------------------------


@dataclass
class Cell:
    """One target at one size and kind: per round, the samples of each mode."""

    plain: list[list[float]] = field(default_factory=list)
    stream: list[list[float]] = field(default_factory=list)
    rps: list[float] = field(default_factory=list)
    error: str | None = None


async def side_by_side(
    targets: list[loadgen.Target], sizes: dict[str, tuple[int, int]], plan: Plan, bar: Any
) -> dict[str, dict[str, dict[str, Cell]]]:
    cells: dict[str, dict[str, dict[str, Cell]]] = {}
    for size, (messages, tokens) in sizes.items():
        history = histories.history_for_tokens(messages, tokens)
        loads = {k: Workload(k, history) for k in KINDS}
        cells[size] = {k: {t.name: Cell(error=t.server.error) for t in targets} for k in KINDS}
        live = [t for t in targets if not t.server.error]
        for t in live:  # warm-up: connections, caches, first-request imports
            for w in loads.values():
                cell = cells[size][w.kind][t.name]
                try:
                    for stream in (False, True):
                        await latency_block(t, w, stream, Plan(latency_n=plan.warmup))
                except (loadgen.BenchError, OSError, asyncio.IncompleteReadError) as exc:
                    cell.error = f"{type(exc).__name__}: {exc}"[:300]
        for r in range(plan.rounds):
            order = live[r % len(live) :] + live[: r % len(live)]
            for w in loads.values():
                for t in order:
                    cell = cells[size][w.kind][t.name]
                    bar.set_postfix_str(f"{size} {w.kind} round {r + 1} {t.name}")
                    if not cell.error:
                        try:
                            cell.plain.append(await latency_block(t, w, False, plan))
                            cell.stream.append(await latency_block(t, w, True, plan))
                            if w.kind == "continuing":
                                rps = await throughput(t, w, plan.clients, plan.throughput_s)
                                cell.rps.append(rps)
                        except (loadgen.BenchError, OSError, asyncio.IncompleteReadError) as exc:
                            cell.error = f"{type(exc).__name__}: {exc}"[:300]
                    bar.update(1)
    return cells


def stat(xs: list[float]) -> dict[str, float]:
    lo, hi = tabulate.spread(xs)
    return {"median": tabulate.median(xs), "min": lo, "max": hi, "rounds": len(xs)}


def latency_figures(cells: dict[str, dict[str, dict[str, Cell]]]) -> dict[str, Any]:
    """Medians over rounds and [min, max] over rounds; 'added' is paired with the direct
    figure of the same round."""
    out: dict[str, Any] = {}
    for size, kinds in cells.items():
        for kind, by_target in kinds.items():
            direct = by_target["direct"]
            d50 = [tabulate.percentile(x, 0.5) * 1000 for x in direct.plain]
            df50 = [tabulate.percentile(x, 0.5) * 1000 for x in direct.stream]
            fig = out.setdefault(size, {}).setdefault(kind, {})
            for name, cell in by_target.items():
                if cell.error or not cell.plain:
                    fig[name] = {"error": cell.error or "no samples"}
                    continue
                p50 = [tabulate.percentile(x, 0.5) * 1000 for x in cell.plain]
                p99 = [tabulate.percentile(x, 0.99) * 1000 for x in cell.plain]
                f50 = [tabulate.percentile(x, 0.5) * 1000 for x in cell.stream]
                n, ns = min(len(p50), len(d50)), min(len(f50), len(df50))
                fig[name] = {
                    "samples": sum(len(x) for x in cell.plain),
                    "p50_ms": stat(p50),
                    "p99_ms": stat(p99),
                    "ttfc_p50_ms": stat(f50),
                    "added_p50_ms": stat([p50[i] - d50[i] for i in range(n)]),
                    "added_ttfc_ms": stat([f50[i] - df50[i] for i in range(ns)]),
                    "rps16": stat(cell.rps) if cell.rps else None,
                }
    return out


def _cell(st: dict[str, float] | None, added: bool) -> str:
    if not st or st["median"] != st["median"]:
        return "-"
    m = st["median"]
    txt = tabulate.fmt(m, 2 if abs(m) < 10 else 1)
    if added and m >= 0:
        txt = "+" + txt
    if st.get("rounds", 1) > 1:
        txt += f" [{tabulate.fmt(st['min'], 1)}–{tabulate.fmt(st['max'], 1)}]"
    return txt


def render_latency(figs: dict[str, Any], names: list[str], peers: list[str]) -> str:
    header = ["history", "session", "figure", *names, "best peer", "ctxproxy ÷ it"]
    rows = []
    spec = [
        ("added p50 ms, non-streaming", "added_p50_ms", "low", True),
        ("added time to first chunk ms", "added_ttfc_ms", "low", True),
        ("requests/s, 16 clients", "rps16", "high", False),
    ]
    for size, kinds in figs.items():
        for kind, by in kinds.items():
            for label, key, better, added in spec:
                if key == "rps16" and kind != "continuing":
                    continue
                cells, values = [], {}
                for n in names:
                    e = by.get(n, {})
                    if "error" in e:
                        cells.append("n/a")
                        continue
                    if n == "direct" and added:
                        cells.append("0")
                        continue
                    cells.append(_cell(e.get(key), added))
                    if e.get(key):
                        values[n] = e[key]["median"]
                ok = {p: values[p] for p in peers if p in values}
                pick = min if better == "low" else max
                best = pick(ok, key=ok.get) if ok else None
                mine = values.get("ctxproxy")
                vs = tabulate.ratio(mine, ok.get(best)) if best else "-"
                rows.append([size, kind, label, *cells, best or "-", vs])
    return tabulate.table(header, rows, left=3)


# --- 3: growth of the per-turn cost in one session ----------------------------------------


async def growth(proxy: loadgen.Target, direct: loadgen.Target, plan: Plan, bar: Any) -> list[dict]:
    """One session through ctxproxy (and the same requests direct) growing to the last
    checkpoint; at each checkpoint, `growth_turns` timed turns of +2 messages each."""
    last = plan.growth[-1]
    lines = _lines_for(last, plan.growth_tokens)
    task = {"role": "user", "content": f"{histories.SESSION_TASK} (growth {next(_COUNTER)})"}

    def history(m: int) -> dict[str, Any]:
        msgs = histories.agent_history(m, lines)
        msgs[1] = task
        return {"model": stub.MODEL, "messages": msgs}

    conns = {t.name: loadgen.Conn(t.server.port) for t in (proxy, direct)}
    points = []
    try:
        for m in plan.growth:
            bar.set_postfix_str(f"growth {m} messages")
            for t in (proxy, direct):  # the jump to this checkpoint, untimed
                await _send(conns[t.name], t.request(history(m - 2)))
            added, directs = [], []
            for i in range(plan.growth_turns):
                req = history(m + 2 * i)
                got = {}
                order = (proxy, direct) if i % 2 else (direct, proxy)
                for t in order:
                    got[t.name] = await _send(conns[t.name], t.request(req))
                added.append((got[proxy.name] - got[direct.name]) * 1000)
                directs.append(got[direct.name] * 1000)
            tokens = histories.count_tokens(history(m)["messages"])
            points.append(
                {
                    "messages": m,
                    "tokens": tokens,
                    "direct_ms": tabulate.median(directs),
                    "added_ms": tabulate.median(added),
                    "added_all": added,
                }
            )
            bar.update(1)
    finally:
        for conn in conns.values():
            await conn.close()
    return points


def _lines_for(messages: int, tokens: int) -> int:
    """Tool-output lines per step for an agent history of `messages` of about `tokens`."""
    per_line = 13
    without = (
        histories.count_tokens(histories.agent_history(min(messages, 200), 0))
        * messages
        / min(messages, 200)
    )
    return max(1, round((tokens - without) / (per_line * messages / 2)))


async def _send(conn: loadgen.Conn, request: bytes) -> float:
    status, _, total, body = await conn.send(request)
    if status != 200:
        raise loadgen.BenchError(f"HTTP {status}: {body[:300]!r}")
    return total


def render_growth(points: list[dict]) -> str:
    first = points[0]["added_ms"] if points else float("nan")
    rows = [
        [
            str(p["messages"]),
            f"{p['tokens']:,}",
            tabulate.fmt(p["direct_ms"], 2),
            tabulate.fmt(p["added_ms"], 2),
            tabulate.ratio(p["added_ms"], first),
        ]
        for p in points
    ]
    header = ["messages", "tokens", "direct ms", "ctxproxy added ms", "÷ first"]
    return tabulate.table(header, rows, left=0)


# --- 4: does anything stall while one client sends a huge request? ------------------------


STALL_LIMIT_S = 90


def huge_by_messages(n: int) -> dict[str, Any]:
    msgs = histories.agent_history(n, 1)
    msgs[1] = {"role": "user", "content": f"{histories.SESSION_TASK} (huge {next(_COUNTER)})"}
    return {"model": stub.MODEL, "messages": msgs}


def huge_by_bytes(size: int) -> dict[str, Any]:
    """About `size` bytes of JSON: an agent history of 100 tool outputs of size/100 bytes."""
    steps = 50
    lines = max(1, size // (steps * 75))  # ~75 bytes a line, then corrected once
    got = len(json.dumps(histories.agent_history(2 + 2 * steps, lines)))
    msgs = histories.agent_history(2 + 2 * steps, max(1, round(lines * size / got)))
    msgs[1] = {"role": "user", "content": f"{histories.SESSION_TASK} (huge {next(_COUNTER)})"}
    return {"model": stub.MODEL, "messages": msgs}


async def stall(
    proxy: loadgen.Target, direct: loadgen.Target, body: dict[str, Any], quiet: bytes
) -> dict:
    """Send `body` once; meanwhile poll /healthz every 10 ms and keep another session busy."""
    health = f"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1:{proxy.server.port}\r\n\r\n".encode()
    data = proxy.request(body)
    polls: list[float] = []
    others: list[float] = []
    result: dict[str, Any] = {"bytes": len(data), "messages": len(body["messages"])}

    async def big() -> None:
        conn = loadgen.Conn(proxy.server.port)
        t0 = time.perf_counter()
        try:
            status, _, _, answer = await asyncio.wait_for(conn.send(data), STALL_LIMIT_S)
            result["status"] = status
            if status != 200:
                result["answer"] = answer[:200].decode(errors="replace")
        except TimeoutError:
            result["status"] = f"unfinished at {STALL_LIMIT_S} s"
        except (OSError, asyncio.IncompleteReadError) as exc:
            result["status"] = f"{type(exc).__name__}"
        finally:
            result["seconds"] = time.perf_counter() - t0
            await conn.close()

    async def poll(done: asyncio.Task) -> None:
        conn = loadgen.Conn(proxy.server.port)
        try:
            while not done.done():
                _, _, total, _ = await conn.send(health)
                polls.append(total * 1000)
                await asyncio.sleep(0.01)
        finally:
            await conn.close()

    async def other(done: asyncio.Task) -> None:
        conn = loadgen.Conn(proxy.server.port)
        try:
            while not done.done():
                others.append(await _send(conn, variant(quiet)) * 1000)
        finally:
            await conn.close()

    task = asyncio.create_task(big())
    await asyncio.sleep(0)
    await asyncio.gather(task, poll(task), other(task))
    result |= {
        "healthz_n": len(polls),
        "healthz_p50_ms": tabulate.percentile(polls, 0.5),
        "healthz_p99_ms": tabulate.percentile(polls, 0.99),
        "healthz_max_ms": max(polls, default=float("nan")),
        "other_n": len(others),
        "other_p50_ms": tabulate.percentile(others, 0.5),
        "other_p99_ms": tabulate.percentile(others, 0.99),
        "other_max_ms": max(others, default=float("nan")),
    }
    return result


def render_stall(rows: dict[str, dict]) -> str:
    header = [
        "huge request",
        "size",
        "its status",
        "its time s",
        "/healthz n",
        "p50 ms",
        "p99 ms",
        "max ms",
        "other session n",
        "p99 ms",
        "max ms",
    ]
    out = []
    for name, r in rows.items():
        out.append(
            [
                name,
                f"{r['bytes'] / 1e6:.1f} MB",
                str(r.get("status")),
                tabulate.fmt(r.get("seconds"), 2),
                str(r["healthz_n"]),
                tabulate.fmt(r["healthz_p50_ms"], 2),
                tabulate.fmt(r["healthz_p99_ms"], 2),
                tabulate.fmt(r["healthz_max_ms"], 1),
                str(r["other_n"]),
                tabulate.fmt(r["other_p99_ms"], 2),
                tabulate.fmt(r["other_max_ms"], 1),
            ]
        )
    return tabulate.table(header, out, left=1)


# --- 5: memory under sustained load -------------------------------------------------------


def rss_mb(pid: int) -> float:
    total = 0
    for p in procmem._tree(pid):
        try:
            for line in Path(f"/proc/{p}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
        except OSError:
            pass
    return total / 1024


async def memory(proxy: loadgen.Target, w: Workload, plan: Plan, bar: Any) -> dict:
    """RSS after warm-up and after rss_requests more, 8 clients continuing their sessions."""
    clients = 8
    bases = [w.base() for _ in range(clients)]
    await asyncio.gather(*(prime(proxy, b) for b in bases))
    templates = [proxy.request(w.turn(b)) for b in bases]
    pid = proxy.server.proc.pid
    samples: list[tuple[int, float]] = []

    async def load(total: int) -> None:
        left = total

        async def client(template: bytes) -> None:
            nonlocal left
            conn = loadgen.Conn(proxy.server.port)
            try:
                while left > 0:
                    left -= 1
                    await _send(conn, variant(template))
            finally:
                await conn.close()

        await asyncio.gather(*(client(tp) for tp in templates))

    bar.set_postfix_str("memory warm-up")
    await load(plan.rss_warmup)
    before = rss_mb(pid)
    started = time.perf_counter()
    step = max(plan.rss_requests // 10, 1)
    for i in range(0, plan.rss_requests, step):
        bar.set_postfix_str(f"memory {i:,}/{plan.rss_requests:,}")
        await load(step)
        samples.append((i + step, rss_mb(pid)))
    after = rss_mb(pid)
    return {
        "requests": plan.rss_requests,
        "warmup": plan.rss_warmup,
        "rss_before_mb": before,
        "rss_after_mb": after,
        "growth_pct": (after - before) / before * 100,
        "samples": samples,
        "seconds": time.perf_counter() - started,
    }


# --- the run ------------------------------------------------------------------------------

# The older tree's own `serve`, with uvicorn's loop and parser as they were before uvloop and
# httptools were installed (uvicorn picks them up by itself when they are).
LAUNCH_BEFORE = (
    # Without the editable install's finder, which would import this tree's proxy instead.
    "import sys; sys.meta_path[:] = [f for f in sys.meta_path "
    "if '__editable__' not in getattr(f, '__module__', '')]; "
    "import functools, uvicorn; "
    "uvicorn.run = functools.partial(uvicorn.run, loop='asyncio', http='h11'); "
    # proxy/cli.py in older trees, proxy/cli/commands.py since the tree moved
    "import importlib; cli = importlib.import_module('proxy.cli'); "
    "main = getattr(cli, 'main', None) or importlib.import_module('proxy.cli.commands').main; "
    "sys.exit(main())"
)


# The same without forcing the loop and parser: for trees that had uvloop and httptools.
LAUNCH_AS_IS = LAUNCH_BEFORE.replace(
    "import functools, uvicorn; "
    "uvicorn.run = functools.partial(uvicorn.run, loop='asyncio', http='h11'); ",
    "",
)


def start_before(
    tree: Path, workdir: Path, upstream: spawn.Server, as_is: bool = False, database_url: str = ""
) -> spawn.Server:
    wd = workdir / "before"
    wd.mkdir(exist_ok=True)
    port = spawn.free_port()
    cfg = spawn.ctxproxy_config(wd, upstream, database_url=database_url or None)
    launch = LAUNCH_AS_IS if as_is else LAUNCH_BEFORE
    argv = [sys.executable, "-c", launch, "serve", "--config", str(cfg)]
    env = {"PYTHONPATH": str(tree.resolve())}
    return spawn.start("before", [*argv, "--port", str(port)], port, "/healthz", wd, env)


def start_with_client(name: str, workdir: Path, upstream: spawn.Server) -> spawn.Server:
    wd = workdir / f"client-{name}"
    wd.mkdir(exist_ok=True)
    port, cfg = spawn.free_port(), spawn.ctxproxy_config(wd, upstream)
    argv = [spawn.CTXPROXY, "serve", "--config", str(cfg), "--port", str(port)]
    env = {"CTXPROXY_UPSTREAM_CLIENT": name}
    return spawn.start(f"ctxproxy-{name}", argv, port, "/healthz", wd, env)


def start_on_postgres(
    admin: str, workdir: Path, upstream: spawn.Server, servers: list, cleanup: list
) -> loadgen.Target:
    """ctxproxy on a fresh PostgreSQL database, as target 'ctxproxy-pg'."""
    from bench.overhead_agents import create_database

    url, drop = create_database(admin)
    cleanup.append(drop)
    wd = workdir / "pg"
    wd.mkdir(exist_ok=True)
    server = spawn.start_ctxproxy(wd, upstream, database_url=url, name="ctxproxy-pg")
    servers.append(server)
    if server.error:
        raise RuntimeError(server.error)
    return loadgen.Target("ctxproxy-pg", server)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.overhead", description=__doc__)
    ap.add_argument("--setup", action="store_true", help="install the peers, then exit")
    ap.add_argument("--no-peers", action="store_true", help="direct and ctxproxy only")
    ap.add_argument(
        "--peers",
        nargs="+",
        choices=[p.name for p in peer_proxies.PEERS],
        help="run only these peers (default all; LiteLLM and Headroom are slow to install)",
    )
    ap.add_argument("--quick", action="store_true", help="tiny sizes, few requests (smoke test)")
    ap.add_argument("--rounds", type=int, help="interleaved rounds (default 3)")
    ap.add_argument("--sizes", nargs="+", choices=[*SIZES, *TINY], help="history sizes")
    ap.add_argument(
        "--only",
        nargs="+",
        choices=["latency", "agents", "growth", "stall", "memory"],
        help="run only these parts",
    )
    ap.add_argument(
        "--postgres",
        metavar="ADMIN_URL",
        help="also run ctxproxy on PostgreSQL as 'ctxproxy-pg', in a fresh database made "
        "beside this one (e.g. postgresql+psycopg://postgres@127.0.0.1:5432/test)",
    )
    ap.add_argument(
        "--before",
        type=Path,
        help="also run ctxproxy from this source tree (e.g. `git archive` of an older commit) "
        "as target 'before', with uvicorn's pure-Python loop and parser as it had them",
    )
    ap.add_argument(
        "--clients",
        nargs="+",
        default=[],
        help="also run ctxproxy with each of these upstream HTTP clients (httpx, httpx-plain; "
        "env CTXPROXY_UPSTREAM_CLIENT) as targets 'ctxproxy-<name>'",
    )
    ap.add_argument(
        "--before-as-is",
        action="store_true",
        help="run --before with whatever loop and parser uvicorn picks (trees that had them)",
    )
    ap.add_argument(
        "--before-postgres",
        metavar="ADMIN_URL",
        help="run --before on PostgreSQL, in a fresh database made beside this one",
    )
    ap.add_argument("--out", type=Path, default=tabulate.RESULTS, help="results folder")
    ap.add_argument("--name", help="results file name (default overhead or overhead-quick)")
    args = ap.parse_args(argv)
    peers = [] if args.no_peers else peer_proxies.pick(args.peers)
    errors = {p.name: peer_proxies.setup_peer(p) for p in peers}
    if args.setup:
        for name, err in errors.items():
            print(f"{name}: {err or 'ready'}")
        return 1 if any(errors.values()) else 0
    plan = QUICK if args.quick else FULL
    if args.rounds:
        plan.rounds = args.rounds
    parts = set(args.only or ["latency", "agents", "growth", "stall", "memory"])
    sizes = TINY if args.quick else SIZES
    if args.sizes:
        sizes = {k: v for k, v in (SIZES | TINY).items() if k in args.sizes}
    wd = tabulate.workdir("ctxproxy-bench-overhead-")
    started = time.monotonic()
    servers: list[spawn.Server] = []
    cleanup: list[Callable[[], None]] = []
    data: dict[str, Any] = {
        "date": tabulate.now(),
        "machine": tabulate.machine(),
        "plan": plan.__dict__,
    }
    texts: list[str] = []
    try:
        upstream = spawn.start_upstream(wd)
        servers.append(upstream)
        proxy = spawn.start_ctxproxy(wd, upstream)
        servers.append(proxy)
        if proxy.error:
            raise RuntimeError(proxy.error)
        direct, mine = loadgen.Target("direct", upstream), loadgen.Target("ctxproxy", proxy)
        targets = [direct, mine]
        if args.postgres:
            targets.append(start_on_postgres(args.postgres, wd, upstream, servers, cleanup))
        if args.before:
            url = ""
            if args.before_postgres:
                from bench.overhead_agents import create_database

                url, drop = create_database(args.before_postgres)
                cleanup.append(drop)
            old = start_before(args.before, wd, upstream, args.before_as_is, url)
            servers.append(old)
            if old.error:
                raise RuntimeError(old.error)
            targets.append(loadgen.Target("before", old))
        for name in args.clients:
            servers.append(start_with_client(name, wd, upstream))
            targets.append(loadgen.Target(f"ctxproxy-{name}", servers[-1]))
        if parts & {"latency", "agents"}:
            for p in peers:
                server = (
                    spawn.Server(p.name, 0, error=errors[p.name])
                    if errors[p.name]
                    else peer_proxies.start_peer(p, wd, upstream)
                )
                servers.append(server)
                targets.append(loadgen.Target(p.name, server, peer_proxies.headers(p)))
        data["peers"] = {p.name: p.spec for p in peers}
        texts, data = asyncio.run(run(targets, sizes, plan, parts, data, [p.name for p in peers]))
    finally:
        for s in reversed(servers):
            s.stop()
        for done in cleanup:
            done()
    notes = [
        f"overhead: {plan.rounds} interleaved rounds, medians [min–max over rounds]; "
        f"{tabulate.now()}; {tabulate.machine()}; run took {time.monotonic() - started:.0f} s",
        f"ctxproxy: context_window {spawn.BIG_WINDOW:,} on the upstream (no compaction), SQLite "
        "in a temp dir, log_level warning",
        "continuing: the session's history is stored; the request adds the answer and one "
        "user message. new: a new task message, so a new session, same other messages",
    ]
    for p in peers:
        t = next((t for t in targets if t.name == p.name), None)
        notes.append(f"{p.name}: {(t.server.error if t else None) or p.spec}")
    for size, (m, tok) in sizes.items():
        notes.append(f"{size}: {m} messages, ~{tok:,} tokens (cl100k)")
    print("\n".join(notes))
    print("\n\n".join(texts))
    name = args.name or ("overhead-quick" if args.quick else "overhead")
    data["notes"], data["tables"] = notes, texts
    j = tabulate.write_json(name, data, args.out)
    print(f"wrote {j}")
    return 0


async def run(
    targets: list[loadgen.Target],
    sizes: dict[str, tuple[int, int]],
    plan: Plan,
    parts: set[str],
    data: dict[str, Any],
    peers: list[str],
) -> tuple[list[str], dict[str, Any]]:
    from tqdm import tqdm

    direct = targets[0]
    proxies = [t for t in targets if t.name in ("ctxproxy", "ctxproxy-pg", "before")]
    texts = []
    steps = 0
    if "latency" in parts:
        steps += plan.rounds * len(sizes) * len(KINDS) * len(targets)
    steps += len(plan.growth) * len(proxies) if "growth" in parts else 0
    steps += plan.rounds * 2 * len(targets) if "agents" in parts else 0
    with tqdm(total=steps, desc="overhead", unit="block", file=sys.stderr, leave=False) as bar:
        if "latency" in parts:
            cells = await side_by_side(targets, sizes, plan, bar)
            figs = latency_figures(cells)
            data["latency"] = figs
            data["raw"] = {
                s: {k: {n: cell.__dict__ for n, cell in by.items()} for k, by in kinds.items()}
                for s, kinds in cells.items()
            }
            texts.append(render_latency(figs, [t.name for t in targets], peers))
        if "agents" in parts:
            from bench import overhead_agents

            figs = await overhead_agents.agent_latency(targets, plan, bar)
            data["agents"] = figs
            texts.append(
                "agents, continuing sessions:\n"
                + overhead_agents.render(figs, [t.name for t in targets])
            )
        if "growth" in parts:
            for proxy in proxies:
                points = await growth(proxy, direct, plan, bar)
                data.setdefault("growth", {})[proxy.name] = points
                texts.append(f"growth, {proxy.name}:\n" + render_growth(points))
        if "stall" in parts or "memory" in parts:
            first = next(iter(sizes.values()))
            quiet_load = Workload("continuing", histories.history_for_tokens(*first))
        for proxy in proxies if "memory" in parts else []:
            mem = await memory(proxy, quiet_load, plan, bar)
            data.setdefault("memory", {})[proxy.name] = mem
            texts.append(
                f"RSS, {proxy.name}: {mem['rss_before_mb']:.1f} MiB after "
                f"{mem['warmup']:,} requests of warm-up, "
                f"{mem['rss_after_mb']:.1f} MiB after {mem['requests']:,} more "
                f"({mem['growth_pct']:+.1f}%, {mem['requests'] / mem['seconds']:.0f} requests/s "
                "with 8 clients continuing their sessions): "
                + ", ".join(f"{n:,}: {r:.1f}" for n, r in mem["samples"])
            )
        for proxy in proxies if "stall" in parts else []:
            base = quiet_load.base()
            await prime(proxy, base)
            quiet = proxy.request(quiet_load.turn(base))
            rows = {}
            for label, body in (
                (f"{plan.stall_messages:,} messages", huge_by_messages(plan.stall_messages)),
                (f"{plan.stall_bytes / 1e6:.0f} MB", huge_by_bytes(plan.stall_bytes)),
            ):
                bar.set_postfix_str(f"stall {proxy.name} {label}")
                rows[label] = await stall(proxy, direct, body, quiet)
            data.setdefault("stall", {})[proxy.name] = rows
            texts.append(f"stall, {proxy.name}:\n" + render_stall(rows))
    return texts, json.loads(json.dumps(data, default=str))


if __name__ == "__main__":
    sys.exit(main())
