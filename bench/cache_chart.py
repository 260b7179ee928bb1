"""The prompt cache as a real llama.cpp server saw it, over a 40-turn agent session at 4k.

Starts xllamacpp + SmolLM2 (4,096 tokens per slot) and ctxproxy in this process, drives the
session twice: compacted, and in observe mode (the client's requests sent as they came; a
second server with a window large enough for the raw history takes those). Prints each turn's
cached tokens beside the prefix ctxproxy expected, the turns flagged with their cause and the
net savings of both; draws the compacted session's cache chart to bench/figures/.
Run from the repository root: python -m bench.cache_chart [--turns 40] [--out PATH]
Ports: ctxproxy and llama.cpp take the ones given (--port, default 27100 and up).
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path
from typing import Any

import httpx

from proxy.app import create_app
from proxy.testing.cache_session import drive, table
from proxy.testing.llamacpp import LlamaServer, ensure_model
from proxy.testing.servers import ServerThread, make_settings

FIGURE = Path(__file__).parent / "figures" / "cache_llamacpp_40.png"


def plot(rows: list[dict[str, Any]], out: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    xs = [x for x in rows if "totals" not in x]
    seq = [x["seq"] for x in xs]
    fig, ax = plt.subplots(figsize=(11, 5))
    ax.plot(seq, [x["tokens_original"] for x in xs], color="#adb5bd", label="original")
    ax.plot(seq, [x["tokens_compiled"] for x in xs], color="#1c7ed6", lw=2.5, label="compiled")
    ax.plot(seq, [x["cached_tokens"] or 0 for x in xs], color="#862e9c", label="cached (server)")
    ax.plot(
        seq,
        [x["cache_expected"] or 0 for x in xs],
        color="#862e9c",
        ls="--",
        label="expected cached (ctxproxy)",
    )
    net, total = [], 0
    for x in xs:
        lost = (x["cache_lost"] or 0) if x["cache_cause"] == "firing" else 0
        total += x["tokens_original"] - x["tokens_compiled"] - lost
        net.append(total)
    ax2 = ax.twinx()
    ax2.plot(seq, net, color="#2b8a3e", lw=2, label="net saved, running total")
    ax2.set_ylabel("net prefill tokens saved (running total)", color="#2b8a3e")
    colors = {"firing": "#e8590c", "client": "#1864ab", "evicted": "#862e9c"}
    for cause, color in colors.items():
        hit = [x for x in xs if x["cache_cause"] == cause]
        if hit:
            ax.scatter(
                [x["seq"] for x in hit],
                [x["cached_tokens"] or 0 for x in hit],
                marker="^",
                s=70,
                color=color,
                zorder=5,
                label=f"cache lost: {cause}",
            )
    ax.set_xlabel("turn")
    ax.set_ylabel("prompt tokens")
    ax.set_title(title)
    lines = ax.get_legend_handles_labels()
    more = ax2.get_legend_handles_labels()
    ax.legend(lines[0] + more[0], lines[1] + more[1], loc="upper left", fontsize=8)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)


def summary(name: str, rows: list[dict[str, Any]]) -> str:
    t = rows[-1]["totals"]
    flagged = [f"{x['seq']}:{x['cache_cause']}" for x in rows[:-1] if x.get("cache_cause")]
    return (
        f"{name}: tokens saved {t['tokens_saved']:,}, cache lost to firings {t['cache_lost']:,}"
        f", net {t['net_saved']:,}; server cached {t['cached_tokens']:,} of "
        f"{t['prompt_tokens']:,} prompt tokens; flagged {flagged}"
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--turns", type=int, default=40)
    ap.add_argument("--port", type=int, default=27100)
    ap.add_argument("--out", type=Path, default=FIGURE)
    ap.add_argument("--from-url", help="plot a session of a running ctxproxy instead: URL")
    ap.add_argument("--session", default="compacted")
    args = ap.parse_args()
    if args.from_url:
        rows = httpx.get(f"{args.from_url}/sessions/{args.session}/exchanges").json()["data"]
        done = [x for x in rows if not x["pending"]]
        print(table(done))
        title = f"llama.cpp + SmolLM2 at 4k, {len(done)} turns: the prompt cache"
        plot(done, args.out, title)
        print(f"figure: {args.out}")
        return
    model = ensure_model()
    # A loaded machine takes minutes to start one: wait for it
    small = LlamaServer(model, port=args.port + 1, n_ctx=8192, n_parallel=2).start(timeout=600)
    large = LlamaServer(model, port=args.port + 2, n_ctx=32768, n_parallel=1)
    try:
        large.start(timeout=600)
        with tempfile.TemporaryDirectory() as tmp:
            ups = [
                {"name": "llama", "kind": "llamacpp", "base_url": small.base_url + "/v1"},
                {
                    "name": "llama-wide",
                    "kind": "llamacpp",
                    "base_url": large.base_url + "/v1",
                    "models": ["smollm2-wide"],
                    "context_window": 4096,
                },
            ]
            ups.reverse()  # the wide one first: it serves only its own model name
            settings = make_settings(Path(tmp), "http://unused/v1", upstreams=ups)
            with ServerThread(create_app(settings), port=args.port) as proxy:
                compacted = drive(proxy.url, "compacted", args.turns)
                observed = drive(
                    proxy.url, "observed", args.turns, model="smollm2-wide", observe=True
                )
    finally:
        small.stop()
        large.stop()
    print("compacted (llama.cpp, 4,096-token slot):\n" + table(compacted))
    print("\nobserved (the raw requests to a 32k server; the view as ctxproxy would at 4k):")
    print(table(observed))
    print("\n" + summary("compacted", compacted))
    print(summary("observed", observed))
    plot(compacted, args.out, f"llama.cpp + SmolLM2, {args.turns} turns at 4k: the prompt cache")
    print(f"figure: {args.out}")


if __name__ == "__main__":
    main()
