"""Overhead per request: ctxproxy beside LiteLLM's and Headroom's proxies, against direct calls.

One scripted upstream on loopback answers every request at once. Rounds rotate through the
targets (direct, ctxproxy, litellm, headroom), so drifts of this noisy machine hit all alike;
figures are medians over rounds, with the range over rounds in brackets.
Run from the repository root: python -m bench.overhead   (first run installs the peers)
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench import common as c

SIZES = {"8k": (20, 8_000), "150k": (400, 150_000)}
TINY = {"tiny": (6, 400)}
CONCURRENCY = (1, 16, 64)


@dataclass
class Plan:
    rounds: int = 4
    latency_n: int = 300  # non-streaming requests per round (or fewer, see latency_s)
    latency_s: float = 3.0
    stream_n: int = 150
    stream_s: float = 2.0
    throughput_s: float = 1.5  # per concurrency level
    warmup: int = 10


FULL = Plan()
QUICK = Plan(
    rounds=2, latency_n=15, latency_s=1, stream_n=8, stream_s=1, throughput_s=0.3, warmup=2
)


@dataclass
class Samples:
    latency: list[list[float]] = field(default_factory=list)  # per round: totals, seconds
    ttfc: list[list[float]] = field(default_factory=list)  # per round: first chunk, seconds
    rps: dict[int, list[float]] = field(default_factory=dict)  # concurrency -> per round
    rss_mb: float | None = None
    error: str | None = None


async def run_block(t: c.Target, body: dict[str, Any], plan: Plan, s: Samples, bar: Any) -> None:
    port = t.server.port
    plain, stream = t.request(body), t.request({**body, "stream": True})
    s.latency.append(
        [x[1] for x in await c.sequential(port, plain, plan.latency_n, plan.latency_s)]
    )
    bar.update(1)
    s.ttfc.append([x[0] for x in await c.sequential(port, stream, plan.stream_n, plan.stream_s)])
    bar.update(1)
    for conc in CONCURRENCY:
        rps = await c.throughput(port, plain, conc, plan.throughput_s)
        s.rps.setdefault(conc, []).append(rps)
        bar.update(1)


async def measure(
    targets: list[c.Target], sizes: dict[str, tuple[int, int]], plan: Plan
) -> dict[str, dict[str, Samples]]:
    from tqdm import tqdm

    live = [t for t in targets if not t.server.error]
    steps = len(sizes) * plan.rounds * len(live) * (2 + len(CONCURRENCY))
    out: dict[str, dict[str, Samples]] = {}
    with tqdm(total=steps, desc="overhead", unit="block", file=sys.stderr, leave=False) as bar:
        for size, (messages, tokens) in sizes.items():
            body = {"model": c.MODEL, "messages": c.history_for_tokens(messages, tokens)}
            got = out[size] = {t.name: Samples(error=t.server.error) for t in targets}
            for t in live:  # warm-up: connections, caches, first-request imports
                try:
                    await c.sequential(t.server.port, t.request(body), plan.warmup, 10)
                    await c.sequential(
                        t.server.port, t.request({**body, "stream": True}), plan.warmup, 10
                    )
                except (c.BenchError, OSError, asyncio.IncompleteReadError) as exc:
                    got[t.name].error = f"{type(exc).__name__}: {exc}"[:300]
                c.reset_peak_rss(t.server.proc.pid)
            for r in range(plan.rounds):
                order = live[r % len(live) :] + live[: r % len(live)]
                for t in order:
                    s = got[t.name]
                    if s.error:
                        bar.update(2 + len(CONCURRENCY))
                        continue
                    bar.set_postfix_str(f"{size} round {r + 1} {t.name}")
                    try:
                        await run_block(t, body, plan, s, bar)
                    except (c.BenchError, OSError, asyncio.IncompleteReadError) as exc:
                        s.error = f"{type(exc).__name__}: {exc}"[:300]
            for t in live:
                got[t.name].rss_mb = c.peak_rss_mb(t.server.proc.pid)
    return out


def figures(samples: dict[str, dict[str, Samples]]) -> dict[str, Any]:
    """Per size and target: medians over rounds and [min, max] over rounds; 'added' is paired
    with the direct figure of the same round."""
    result: dict[str, Any] = {}
    for size, by_target in samples.items():
        direct = by_target["direct"]
        result[size] = {}
        for name, s in by_target.items():
            if s.error or not s.latency:
                result[size][name] = {"error": s.error or "no samples"}
                continue
            rounds = range(min(len(s.latency), len(direct.latency)))
            p50 = [c.percentile(x, 0.5) * 1000 for x in s.latency]
            p99 = [c.percentile(x, 0.99) * 1000 for x in s.latency]
            f50 = [c.percentile(x, 0.5) * 1000 for x in s.ttfc]
            d50 = [c.percentile(x, 0.5) * 1000 for x in direct.latency]
            d99 = [c.percentile(x, 0.99) * 1000 for x in direct.latency]
            df50 = [c.percentile(x, 0.5) * 1000 for x in direct.ttfc]
            pooled = [x * 1000 for r in s.latency for x in r]
            entry = {
                "samples": len(pooled),
                "p50_ms": stat(p50),
                "p99_ms": stat(p99),
                "p99_pooled_ms": c.percentile(pooled, 0.99),
                "ttfc_p50_ms": stat(f50),
                "added_p50_ms": stat([p50[i] - d50[i] for i in rounds]),
                "added_p99_ms": stat([p99[i] - d99[i] for i in rounds]),
                "added_ttfc_ms": stat([f50[i] - df50[i] for i in rounds]),
                "rps": {str(k): stat(v) for k, v in s.rps.items()},
                "peak_rss_mb": s.rss_mb,
            }
            result[size][name] = entry
    return result


def stat(xs: list[float]) -> dict[str, float]:
    lo, hi = c.spread(xs)
    return {"median": c.median(xs), "min": lo, "max": hi, "rounds": len(xs)}


def _rps(k: int) -> Any:
    return lambda e: e["rps"][str(k)]


ROWS = [
    ("p50 latency ms, non-streaming", lambda e: e["p50_ms"], "low"),
    ("added p50 ms, non-streaming", lambda e: e["added_p50_ms"], "low"),
    ("added p99 ms, non-streaming", lambda e: e["added_p99_ms"], "low"),
    ("added time to first chunk ms, streaming", lambda e: e["added_ttfc_ms"], "low"),
    *[(f"throughput rps, concurrency {k}", _rps(k), "high") for k in CONCURRENCY],
    ("proxy peak RSS MiB", lambda e: {"median": e["peak_rss_mb"]}, "low"),
]


def render(figs: dict[str, Any], names: list[str], peers: list[str]) -> str:
    header = ["history", "figure", *names, "ctxproxy ÷ direct", "fastest peer", "ctxproxy ÷ it"]
    rows = []
    for size, by in figs.items():
        for label, get, better in ROWS:
            cells, values = [], {}
            for n in names:
                e = by.get(n, {})
                if "error" in e:
                    cells.append("n/a")
                    continue
                st = get(e)
                values[n] = st["median"]
                added = label.startswith("added")
                if n == "direct" and added:
                    cells.append("0")
                    continue
                txt = c.fmt(st["median"], 2 if abs(st["median"]) < 10 else 1)
                txt = ("+" + txt) if added and st["median"] >= 0 else txt
                if "min" in st and st["rounds"] > 1:
                    txt += f" [{c.fmt(st['min'], 1)}–{c.fmt(st['max'], 1)}]"
                cells.append(txt)
            ok_peers = {p: values[p] for p in peers if p in values}
            best = (
                (min if better == "low" else max)(ok_peers, key=ok_peers.get) if ok_peers else None
            )
            mine = values.get("ctxproxy")
            vs_direct = "-" if label.startswith("added") else c.ratio(mine, values.get("direct"))
            rows.append(
                [size, label, *cells, vs_direct, best or "-", c.ratio(mine, ok_peers.get(best))]
            )
    return c.table(header, rows, left=2)


def plot(figs: dict[str, Any], names: list[str], path_name: str, out: Path) -> Path:
    plt = c.pyplot()
    sizes = list(figs)
    fig, axes = plt.subplots(len(sizes), 2, figsize=(11, 3.6 * len(sizes)), squeeze=False)
    for row, size in enumerate(sizes):
        by = figs[size]
        ok = [n for n in names if "error" not in by.get(n, {"error": 1})]
        ax = axes[row][0]
        added = [by[n]["added_p50_ms"]["median"] for n in ok]
        ttfc = [by[n]["added_ttfc_ms"]["median"] for n in ok]
        xs = range(len(ok))
        ax.bar([x - 0.2 for x in xs], added, 0.4, label="added p50, non-streaming")
        ax.bar([x + 0.2 for x in xs], ttfc, 0.4, label="added first chunk, streaming")
        ax.set_xticks(list(xs), ok)
        ax.set_ylabel("ms added vs direct")
        ax.set_title(f"{size} history: added latency")
        ax.legend(fontsize=8)
        ax = axes[row][1]
        for n in ok:
            ax.plot(
                CONCURRENCY, [by[n]["rps"][str(k)]["median"] for k in CONCURRENCY], "o-", label=n
            )
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xticks(CONCURRENCY, [str(k) for k in CONCURRENCY])
        ax.set_xlabel("concurrent clients")
        ax.set_ylabel("requests/s")
        ax.set_title(f"{size} history: throughput")
        ax.legend(fontsize=8)
    return c.save_plot(fig, path_name, out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.overhead", description=__doc__)
    ap.add_argument("--setup", action="store_true", help="install the peers, then exit")
    ap.add_argument("--no-peers", action="store_true", help="direct and ctxproxy only")
    ap.add_argument("--quick", action="store_true", help="tiny history, few requests (smoke test)")
    ap.add_argument("--rounds", type=int, help="interleaved rounds (default 4)")
    ap.add_argument("--out", type=Path, default=c.RESULTS, help="results folder")
    args = ap.parse_args(argv)
    peers = [] if args.no_peers else c.PEERS
    errors = {p.name: c.setup_peer(p) for p in peers}
    if args.setup:
        for name, err in errors.items():
            print(f"{name}: {err or 'ready'}")
        return 1 if any(errors.values()) else 0
    plan = QUICK if args.quick else FULL
    if args.rounds:
        plan.rounds = args.rounds
    sizes = TINY if args.quick else SIZES
    wd = c.workdir("ctxproxy-bench-overhead-")
    started = time.monotonic()
    servers: list[c.Server] = []
    try:
        upstream = c.start_upstream(wd)
        servers.append(upstream)
        proxy = c.start_ctxproxy(wd, upstream)
        servers.append(proxy)
        if proxy.error:
            raise RuntimeError(proxy.error)
        targets = [c.Target("direct", upstream), c.Target("ctxproxy", proxy)]
        for p in peers:
            server = (
                c.Server(p.name, 0, error=errors[p.name])
                if errors[p.name]
                else c.start_peer(p, wd, upstream)
            )
            servers.append(server)
            key = c.LITELLM_KEY if p.name == "litellm" else "unused"
            targets.append(c.Target(p.name, server, {"Authorization": f"Bearer {key}"}))
        samples = asyncio.run(measure(targets, sizes, plan))
    finally:
        for s in reversed(servers):
            s.stop()
    names = [t.name for t in targets]
    figs = figures(samples)
    text = render(figs, names, [p.name for p in peers])
    elapsed = time.monotonic() - started
    notes = [
        f"overhead: medians of {plan.rounds} interleaved rounds [min–max over rounds]; "
        f"{c.now()}; {c.machine()}; run took {elapsed:.0f} s",
        f"ctxproxy: context_window {c.BIG_WINDOW:,} on the upstream (no compaction), "
        "pipeline [traceback, tiered], SQLite in a temp dir, log_level warning",
    ]
    for p in peers:
        t = next(t for t in targets if t.name == p.name)
        state = t.server.error or f"{p.spec}"
        notes.append(f"{p.name}: {state}")
    for size, (m, tok) in sizes.items():
        notes.append(f"{size}: {m} messages, ~{tok:,} tokens (cl100k)")
    for size, by in figs.items():
        for name, e in by.items():
            if "error" in e and e["error"]:
                notes.append(f"{size} {name}: {e['error']}")
    print("\n".join(notes))
    print(text)
    name = "overhead-quick" if args.quick else "overhead"
    data = {
        "date": c.now(),
        "machine": c.machine(),
        "plan": plan.__dict__,
        "sizes": {k: {"messages": m, "tokens": t} for k, (m, t) in sizes.items()},
        "peers": {p.name: p.spec for p in peers},
        "context_window": c.BIG_WINDOW,
        "figures": figs,
        "raw": {
            size: {
                n: {"latency_s": s.latency, "ttfc_s": s.ttfc, "rps": s.rps, "error": s.error}
                for n, s in by.items()
            }
            for size, by in samples.items()
        },
        "table": text,
        "notes": notes,
    }
    j = c.write_json(name, data, args.out)
    png = plot(figs, names, name, args.out)
    print(f"wrote {j} and {png}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
