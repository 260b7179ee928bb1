"""Per-request cost and storage as one agent session grows from 10 to 2,000 messages.

Each turn adds one assistant tool call and its tool result. Two measurements:
- in process, the route's own steps timed one by one (parse the body, compile the view,
  store the request, store the answer): request handling without the upstream and HTTP;
- end to end, every turn sent through a `ctxproxy serve` process and straight to the upstream:
  the difference is what the proxy adds, HTTP included.
The naive baseline, timed side by side at the checkpoints: store the whole history's JSON every
turn and count every message's tokens again with tiktoken.
Run from the repository root: python -m bench.scaling
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sqlite3
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from bench import loadgen, spawn, stub, tabulate
from proxy.testing import histories
from proxy.testing.records import finish_turn, new_request

CHECKPOINTS = [10, 20, 50, 100, 200, 300, 500, 750, 1000, 1250, 1500, 1750, 2000]
QUICK_CHECKPOINTS = [10, 20, 30, 40]


def turns(last: int) -> list[int]:
    """History lengths, one turn each: 10, 12, ..., last (one tool call + result per turn)."""
    return list(range(10, last + 1, 2))


def clear_caches() -> None:
    """A cold compile: what a restarted proxy pays for a long session's first request."""
    from strategies.elide import elide
    from strategies.forms import _truncate

    elide.cache_clear()
    _truncate.cache_clear()


def sqlite_bytes(path: Path) -> int:
    with sqlite3.connect(path) as db:
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    wal = path.with_name(path.name + "-wal")
    return path.stat().st_size + (wal.stat().st_size if wal.exists() else 0)


class Naive:
    """A proxy that keeps no structure: the full history JSON per turn, every token recounted."""

    def __init__(self, path: Path):
        self.db = sqlite3.connect(path, isolation_level=None)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=NORMAL")
        self.db.execute("CREATE TABLE turns (id INTEGER PRIMARY KEY, session TEXT, body TEXT)")
        self.bytes = 0  # what storing every turn would have written (timed turns only insert)

    def account(self, raw: bytes) -> None:
        self.bytes += len(raw)

    def handle(self, raw: bytes) -> float:
        from proxy.compile.tokens import TokenCounter

        start = time.perf_counter()
        body = json.loads(raw)
        TokenCounter().count_messages(body["messages"])  # fresh counter: nothing cached
        self.db.execute("BEGIN")
        self.db.execute(
            "INSERT INTO turns (session, body) VALUES (?, ?)",
            ("s", json.dumps(body["messages"], separators=(",", ":"))),
        )
        self.db.execute("COMMIT")
        elapsed = time.perf_counter() - start
        self.db.execute("DELETE FROM turns")  # the accounted bytes stand for the stored rows
        return elapsed


def in_process(last: int, checkpoints: list[int], window: int, wd: Path, bar: Any) -> dict:
    """The chat route's steps, timed one by one, on a fresh store; naive beside it."""
    from proxy.compile.tokens import TokenCounter
    from proxy.compile.view import compile_request
    from proxy.formats.chat import parse_chat, parse_json
    from proxy.sessions.identify import identify
    from proxy.settings import CompactionSettings
    from proxy.store import Store
    from proxy.store.digest import hash_messages
    from proxy.store.states import Decisions

    db = wd / "inproc.db"
    store = Store(f"sqlite:///{db}")
    store.upgrade()
    naive = Naive(wd / "naive.db")
    settings = CompactionSettings()
    counter = TokenCounter()
    clear_caches()
    warm_up = [{"role": "system", "content": "warm-up"}, *histories.agent_history(12)[1:]]
    ref = store.record_request(
        new_request(
            "warm-up",
            warm_up,
            request={},
            model=stub.MODEL,
            upstream="bench",
            tokens_original=0,
            tokens_compiled=0,
        )
    )  # one-time costs (imports, SQL statement compilation) are not the session's
    finish_turn(store, ref, warm_up[-2])
    compile_request({"messages": warm_up}, window=window, settings=settings, counter=counter)
    per_turn: list[dict[str, float]] = []
    points: list[dict[str, Any]] = []
    unique: dict[str, int] = {}
    for n in turns(last):
        msgs = histories.agent_history(n)
        body = {"model": stub.MODEL, "messages": msgs}
        raw = json.dumps(body).encode()
        t0 = time.perf_counter()
        parsed = parse_json(raw)
        parse_chat(parsed)
        key = identify(None, None, parsed)
        hashes = hash_messages(parsed["messages"])
        prior = store.load_state(key.id, hashes)
        t1 = time.perf_counter()
        compiled = compile_request(
            parsed,
            window=window,
            settings=settings,
            counter=counter.corrected(1.0),
            prior=prior.state if prior else None,
        )
        t2 = time.perf_counter()
        decided = Decisions(
            compiled.state, compiled.factor, compiled.raw_prompt, compiled.tokens_original
        )
        ref = store.record_request(
            new_request(
                key.id,
                parsed["messages"],
                source=key.source,
                request={},
                model=stub.MODEL,
                upstream="bench",
                compiled=compiled.messages,
                tokens_original=compiled.tokens_original,
                tokens_compiled=compiled.tokens_compiled,
                budget=compiled.budget,
                window=compiled.window,
                pipeline=list(settings.pipeline),
                events=[e.to_dict() for e in compiled.events],
                decided=decided if compiled.state else None,
                hashes=hashes,
            )
        )
        t3 = time.perf_counter()
        answer = histories.assistant_step(sum(1 for m in msgs if m["role"] == "tool"))
        finish_turn(
            store, ref, answer, {"prompt_tokens": compiled.tokens_compiled, "completion_tokens": 9}
        )
        t4 = time.perf_counter()
        per_turn.append(
            {
                "messages": n,
                "parse_ms": (t1 - t0) * 1000,
                "compile_ms": (t2 - t1) * 1000,
                "store_ms": (t3 - t2 + t4 - t3) * 1000,
                "total_ms": (t4 - t0) * 1000,
            }
        )
        naive.account(json.dumps(msgs, separators=(",", ":")).encode())
        for m in [*msgs, answer]:
            h = json.dumps(m, sort_keys=True, separators=(",", ":"))
            unique.setdefault(h, len(h.encode()))
        if n in checkpoints:
            cold = []
            for _ in range(3):
                clear_caches()
                fresh = json.loads(raw)
                s = time.perf_counter()
                compile_request(fresh, window=window, settings=settings, counter=TokenCounter())
                cold.append((time.perf_counter() - s) * 1000)
            # the running counter and caches again hold this turn (the cold runs cleared them)
            compile_request(json.loads(raw), window=window, settings=settings, counter=counter)
            naive_ms = statistics.median(naive.handle(raw) * 1000 for _ in range(3))
            recent = per_turn[-5:]
            points.append(
                {
                    "messages": n,
                    "tokens": compiled.tokens_original,
                    "body_bytes": len(raw),
                    "handling_ms": statistics.median(t["total_ms"] for t in recent),
                    "parse_ms": statistics.median(t["parse_ms"] for t in recent),
                    "compile_warm_ms": statistics.median(t["compile_ms"] for t in recent),
                    "compile_cold_ms": statistics.median(cold),
                    "store_ms": statistics.median(t["store_ms"] for t in recent),
                    "naive_ms": naive_ms,
                    "db_bytes": sqlite_bytes(db),
                    "naive_bytes": naive.bytes,
                    "unique_content_bytes": sum(unique.values()),
                    "compaction": compiled.summary(),
                }
            )
        bar.update(1)
    store.close()
    return {"per_turn": per_turn, "points": points}


async def end_to_end(last: int, checkpoints: list[int], window: int, wd: Path, bar: Any) -> dict:
    """Every turn through `ctxproxy serve` and straight to the upstream; added = the difference."""
    e2e = wd / "e2e"
    e2e.mkdir()
    servers: list[spawn.Server] = []
    try:
        upstream = spawn.start_upstream(e2e, agent=True)
        servers.append(upstream)
        proxy = spawn.start_ctxproxy(e2e, upstream, window)
        servers.append(proxy)
        if proxy.error:
            raise RuntimeError(proxy.error)
        direct, through = loadgen.Conn(upstream.port), loadgen.Conn(proxy.port)
        warm_up = {
            "model": stub.MODEL,
            "messages": [
                {"role": "system", "content": "warm-up"},
                *histories.agent_history(12)[1:],
            ],
        }
        for conn, port in ((direct, upstream.port), (through, proxy.port)):
            for _ in range(3):
                await conn.send(loadgen.http_request(port, "/v1/chat/completions", warm_up, {}))
        per_turn = []
        for n in turns(last):
            body = {"model": stub.MODEL, "messages": histories.agent_history(n)}
            times = {}
            for name, conn, port in (
                ("direct", direct, upstream.port),
                ("proxy", through, proxy.port),
            ):
                req = loadgen.http_request(port, "/v1/chat/completions", body, {})
                status, _, total, out = await conn.send(req)
                if status != 200:
                    raise loadgen.BenchError(f"{name} HTTP {status}: {out[:300]!r}")
                times[name] = total * 1000
            per_turn.append({"messages": n, **times, "added_ms": times["proxy"] - times["direct"]})
            bar.update(1)
        await direct.close()
        await through.close()
        db_bytes = sqlite_bytes(e2e / "ctxproxy.db")
    finally:
        for s in reversed(servers):
            s.stop()
    points = {}
    for cp in checkpoints:
        recent = [t for t in per_turn if cp - 10 < t["messages"] <= cp] or per_turn[-1:]
        points[cp] = statistics.median(t["added_ms"] for t in recent)
    return {"per_turn": per_turn, "added_ms_at": points, "db_bytes": db_bytes}


def fit(xs: list[float], ys: list[float]) -> tuple[float, float, float]:
    """Least-squares line: slope, intercept, R²."""
    import numpy as np

    slope, intercept = np.polyfit(xs, ys, 1)
    pred = [slope * x + intercept for x in xs]
    mean = sum(ys) / len(ys)
    ss_tot = sum((y - mean) ** 2 for y in ys) or 1.0
    r2 = 1 - sum((y - p) ** 2 for y, p in zip(ys, pred, strict=True)) / ss_tot
    return float(slope), float(intercept), r2


def summarize(inproc: dict, e2e: dict | None) -> dict[str, Any]:
    per_turn = inproc["per_turn"]
    xs = [t["messages"] for t in per_turn]
    pts = inproc["points"]
    out = {
        "handling": fit(xs, [t["total_ms"] for t in per_turn]),
        "compile_warm": fit(xs, [t["compile_ms"] for t in per_turn]),
        "store": fit(xs, [t["store_ms"] for t in per_turn]),
        "naive": fit([p["messages"] for p in pts], [p["naive_ms"] for p in pts]),
        "db_vs_content": fit(
            [p["unique_content_bytes"] for p in pts], [p["db_bytes"] for p in pts]
        ),
        "naive_bytes_vs_content": fit(
            [p["unique_content_bytes"] for p in pts], [p["naive_bytes"] for p in pts]
        ),
    }
    if e2e:
        ex = [t["messages"] for t in e2e["per_turn"]]
        out["e2e_added"] = fit(ex, [t["added_ms"] for t in e2e["per_turn"]])
    return out


def render(inproc: dict, e2e: dict | None, fits: dict[str, Any]) -> str:
    pts = inproc["points"]
    header = [
        "messages",
        "tokens",
        "handling ms",
        "parse",
        "compile warm",
        "compile cold",
        "store",
        "e2e added ms",
        "naive ms",
        "naive ÷ ctxproxy",
        "DB bytes",
        "naive bytes",
        "naive ÷ ctxproxy",
    ]
    rows = []
    for p in pts:
        added = e2e["added_ms_at"].get(p["messages"]) if e2e else None
        rows.append(
            [
                str(p["messages"]),
                f"{p['tokens']:,}",
                tabulate.fmt(p["handling_ms"], 2),
                tabulate.fmt(p["parse_ms"], 2),
                tabulate.fmt(p["compile_warm_ms"], 2),
                tabulate.fmt(p["compile_cold_ms"], 1),
                tabulate.fmt(p["store_ms"], 2),
                tabulate.fmt(added, 2),
                tabulate.fmt(p["naive_ms"], 1),
                tabulate.ratio(p["naive_ms"], p["handling_ms"]),
                f"{p['db_bytes']:,}",
                f"{p['naive_bytes']:,}",
                tabulate.ratio(p["naive_bytes"], p["db_bytes"]),
            ]
        )
    detail = tabulate.table(header, rows, left=0)

    def per_k(f: tuple[float, float, float]) -> str:
        return f"{f[0] * 1000:.2f} ms per 1k msgs (R² {f[2]:.2f})"

    first, last = pts[0], pts[-1]
    summary_rows = [
        [
            "handling ms at " + str(first["messages"]) + " messages",
            tabulate.fmt(first["handling_ms"], 2),
            tabulate.fmt(first["naive_ms"], 2),
            tabulate.ratio(first["handling_ms"], first["naive_ms"]),
        ],
        [
            "handling ms at " + str(last["messages"]) + " messages",
            tabulate.fmt(last["handling_ms"], 2),
            tabulate.fmt(last["naive_ms"], 2),
            tabulate.ratio(last["handling_ms"], last["naive_ms"]),
        ],
        [
            "growth of handling time (linear fit)",
            per_k(fits["handling"]),
            per_k(fits["naive"]),
            tabulate.ratio(fits["handling"][0], fits["naive"][0]),
        ],
        ["  of which compile (warm)", per_k(fits["compile_warm"]), "-", "-"],
        ["  of which store", per_k(fits["store"]), "-", "-"],
        [
            f"compile cold ms at {last['messages']} messages",
            tabulate.fmt(last["compile_cold_ms"], 1),
            tabulate.fmt(last["naive_ms"], 1),
            tabulate.ratio(last["compile_cold_ms"], last["naive_ms"]),
        ],
        [
            f"DB bytes at {last['messages']} messages",
            f"{last['db_bytes']:,}",
            f"{last['naive_bytes']:,}",
            tabulate.ratio(last["db_bytes"], last["naive_bytes"]),
        ],
        [
            "DB bytes per byte of unique content (fit)",
            f"{fits['db_vs_content'][0]:.2f} (R² {fits['db_vs_content'][2]:.3f})",
            f"{fits['naive_bytes_vs_content'][0]:.1f} (R² {fits['naive_bytes_vs_content'][2]:.3f})",
            tabulate.ratio(fits["db_vs_content"][0], fits["naive_bytes_vs_content"][0]),
        ],
    ]
    if e2e:
        e = fits["e2e_added"]
        a0 = e2e["added_ms_at"][first["messages"]]
        a1 = e2e["added_ms_at"][last["messages"]]
        summary_rows.insert(
            3,
            [
                "e2e added ms (HTTP, vs direct), first → last",
                f"{tabulate.fmt(a0, 2)} → {tabulate.fmt(a1, 2)}",
                "-",
                "-",
            ],
        )
        summary_rows.insert(4, ["growth of e2e added time (linear fit)", per_k(e), "-", "-"])
    summary = tabulate.table(
        ["figure", "ctxproxy", "naive baseline", "ctxproxy ÷ naive"], summary_rows
    )
    return detail + "\n\n" + summary


def plot(inproc: dict, e2e: dict | None, name: str, out: Path) -> Path:
    plt = tabulate.pyplot()
    fig, (a, b) = plt.subplots(1, 2, figsize=(12, 4.2))
    per_turn, pts = inproc["per_turn"], inproc["points"]
    xs = [t["messages"] for t in per_turn]
    a.plot(xs, [t["total_ms"] for t in per_turn], ".", ms=2, label="ctxproxy handling (in process)")
    a.plot(xs, [t["compile_ms"] for t in per_turn], ".", ms=2, label="  compile, warm")
    a.plot(xs, [t["store_ms"] for t in per_turn], ".", ms=2, label="  store")
    if e2e:
        a.plot(
            [t["messages"] for t in e2e["per_turn"]],
            [t["added_ms"] for t in e2e["per_turn"]],
            ".",
            ms=2,
            alpha=0.5,
            label="ctxproxy added, end to end",
        )
    a.plot(
        [p["messages"] for p in pts],
        [p["compile_cold_ms"] for p in pts],
        "s-",
        ms=4,
        label="compile, cold",
    )
    a.plot([p["messages"] for p in pts], [p["naive_ms"] for p in pts], "o-", label="naive baseline")
    a.set_xlabel("messages in the session")
    a.set_ylabel("ms per request")
    a.set_title("per-request cost")
    a.legend(fontsize=7)
    b.plot(
        [p["messages"] for p in pts],
        [p["db_bytes"] / 1e6 for p in pts],
        "o-",
        label="ctxproxy database",
    )
    b.plot(
        [p["messages"] for p in pts],
        [p["unique_content_bytes"] / 1e6 for p in pts],
        "--",
        label="unique content",
    )
    b.plot(
        [p["messages"] for p in pts],
        [p["naive_bytes"] / 1e6 for p in pts],
        "o-",
        label="naive: full history per turn",
    )
    b.set_yscale("log")
    b.set_xlabel("messages in the session")
    b.set_ylabel("MB")
    b.set_title("storage")
    b.legend(fontsize=7)
    return tabulate.save_plot(fig, name, out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.scaling", description=__doc__)
    ap.add_argument("--quick", action="store_true", help="10 to 40 messages (smoke test)")
    ap.add_argument("--last", type=int, help="grow the session to this many messages (2000)")
    ap.add_argument(
        "--window",
        type=int,
        default=spawn.BIG_WINDOW,
        help=f"ctxproxy's context_window (default {spawn.BIG_WINDOW:,}: no compaction)",
    )
    ap.add_argument("--no-e2e", action="store_true", help="skip the end-to-end pass")
    ap.add_argument("--out", type=Path, default=tabulate.RESULTS, help="results folder")
    args = ap.parse_args(argv)
    from tqdm import tqdm

    checkpoints = QUICK_CHECKPOINTS if args.quick else CHECKPOINTS
    last = args.last or checkpoints[-1]
    checkpoints = [p for p in checkpoints if p <= last] + (
        [last] if last not in checkpoints else []
    )
    wd = tabulate.workdir("ctxproxy-bench-scaling-")
    started = time.monotonic()
    n = len(turns(last)) * (1 if args.no_e2e else 2)
    with tqdm(total=n, desc="scaling", unit="turn", file=sys.stderr, leave=False) as bar:
        inproc = in_process(last, checkpoints, args.window, wd, bar)
        e2e = (
            None
            if args.no_e2e
            else asyncio.run(end_to_end(last, checkpoints, args.window, wd, bar))
        )
    fits = summarize(inproc, e2e)
    text = render(inproc, e2e, fits)
    notes = [
        f"scaling: one session, 10 → {last} messages, one tool call + result per turn; "
        f"{tabulate.now()}; {tabulate.machine()}; run took {time.monotonic() - started:.0f} s",
        f"ctxproxy: context_window {args.window:,}, pipeline [traceback, tiered]; handling = "
        "parse + compile + store request + store answer, timed in process (median of the last "
        "5 turns); e2e added = through `ctxproxy serve` minus direct, same turn",
        "naive: json.loads + fresh tiktoken count of every message + INSERT of the full history "
        "JSON (median of 3 at each checkpoint); naive bytes = sum of every turn's history JSON",
    ]
    print("\n".join(notes))
    print(text)
    name = "scaling-quick" if args.quick else "scaling"
    data = {
        "date": tabulate.now(),
        "machine": tabulate.machine(),
        "window": args.window,
        "points": inproc["points"],
        "per_turn": inproc["per_turn"],
        "e2e": e2e,
        "fits": {k: {"slope": v[0], "intercept": v[1], "r2": v[2]} for k, v in fits.items()},
        "table": text,
        "notes": notes,
    }
    j = tabulate.write_json(name, data, args.out)
    png = plot(inproc, e2e, name, args.out)
    print(f"wrote {j} and {png}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
