"""Compression quality: what each pipeline and each peer keeps of what the next step needs.

Every trajectory of the corpus (bench/corpus: real tool runs on this machine plus BFCL
multi-turn tasks) is compiled turn by turn, as a client would send it, for each budget and
method. At the final turn we measure token reduction, evidence recall (share of the marked
strings still present verbatim) and whether the output fits; at every turn whether it is a
valid OpenAI request, how much of it is an exact prefix of the next turn's, and how long the
call took. Headline figures cover the trajectories whose history exceeds the budget.
Run from the repository root: python -m bench.quality  (--quick for a small run)
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench import baselines
from bench.corpus import Trajectory, load_corpus
from proxy.compile.tokens import TokenCounter
from proxy.compile.view import compile_request
from proxy.errors import ContextLengthExceeded
from proxy.recall import tool as recall_tool
from proxy.settings import CompactionSettings
from proxy.testing.validity import problems
from strategies.messages import canonical_json, message_hash, original_ref
from strategies.pipeline import request_points

DEFAULT = ["traceback", "tiered", "forget"]
# name: (pipeline, other compaction settings)
PIPELINES: dict[str, tuple[list[str], dict[str, Any]]] = {
    "default": (DEFAULT, {}),
    # Fires earlier, at the previous default's trigger: recall at about its reduction.
    "default@0.6": (DEFAULT, {"trigger": 0.6}),
    "none": (["none"], {}),
    "sliding_window": (["sliding_window"], {}),
    "fold": (["fold"], {}),
    "tiered": (["tiered"], {}),
    "traceback+tiered": (["traceback", "tiered"], {}),
}
PEERS = ["middle-out", "langchain", "litellm", "headroom"]
RESULTS = Path(__file__).parent / "results"


@dataclass
class Outcome:
    messages: list[dict] | None  # None: rejected or failed, nothing reaches the model
    ms: float
    fresh: bool = True  # False when ctxproxy reports no new compaction for this turn
    error: str | None = None


Method = Callable[[list[dict], int, TokenCounter], Outcome]


# --- the methods ----------------------------------------------------------------------------


def ctxproxy(pipeline: list[str], overrides: dict[str, Any]) -> Method:
    """ctxproxy's compiler as the route runs it: each turn from the session's stored state of
    the previous one (kept here, as the store keeps it), a new session when the history is
    not an extension of the last one."""
    settings = CompactionSettings(pipeline=pipeline, reserve_tokens=0, safety_margin=0, **overrides)
    session: dict[str, Any] = {"messages": [], "state": None}

    def run(messages: list[dict], budget: int, counter: TokenCounter) -> Outcome:
        last = session["messages"]
        prior = session["state"] if last and messages[: len(last)] == last else None
        body = json.loads(json.dumps({"messages": messages}))  # a request arrives as new objects
        start = time.perf_counter()
        try:
            c = compile_request(
                body, window=budget, settings=settings, counter=counter, prior=prior
            )
        except ContextLengthExceeded as exc:
            return Outcome(None, (time.perf_counter() - start) * 1000, error=str(exc))
        ms = (time.perf_counter() - start) * 1000
        session["messages"], session["state"] = list(messages), c.state
        return Outcome(c.messages, ms, fresh=c.summary() != "none")

    return run


def in_process(fn: Callable[[list[dict], int, Callable], list[dict]]) -> Method:
    def run(messages: list[dict], budget: int, counter: TokenCounter) -> Outcome:
        start = time.perf_counter()
        view = fn(messages, budget, lambda ms: counter.estimate_request(ms, None))
        return Outcome(view, (time.perf_counter() - start) * 1000)

    return run


def via_worker(worker: baselines.Worker) -> Method:
    def run(messages: list[dict], budget: int, counter: TokenCounter) -> Outcome:
        try:
            view, ms = worker.call(messages, budget)
        except RuntimeError as exc:
            return Outcome(None, 0.0, error=str(exc))
        return Outcome(view, ms)

    return run


def methods(peers: list[str], install: bool) -> tuple[dict[str, Method], dict[str, str], list]:
    """Methods by name, notes per peer (version or why it is missing), workers to close."""
    out: dict[str, Method] = {name: ctxproxy(*p) for name, p in PIPELINES.items()}
    notes: dict[str, str] = {}
    workers = []
    for peer in peers:
        try:
            if peer == "middle-out":
                out[peer], notes[peer] = in_process(baselines.middle_out), "own implementation"
            elif peer == "langchain":
                import langchain_core

                out[peer] = in_process(baselines.langchain_trim())
                notes[peer] = f"langchain-core {langchain_core.__version__}"
            else:
                worker = baselines.Worker(peer, install)
                workers.append(worker)
                out[peer], notes[peer] = via_worker(worker), f"{peer} {worker.version}"
        except (baselines.Unavailable, ImportError) as exc:
            notes[peer] = f"unavailable: {exc}"
    return out, notes, workers


# --- measures -------------------------------------------------------------------------------


def visible_text(view: list[dict]) -> str:
    parts = []
    for m in view:
        content = m.get("content")
        if isinstance(content, str):
            parts.append(content)
        elif isinstance(content, list):
            parts += [p.get("text", "") for p in content if isinstance(p, dict)]
        for call in m.get("tool_calls") or []:
            args = call.get("function", {}).get("arguments") or ""
            parts.append(args)
            try:  # arguments are JSON: the decoded values are what the model reads
                parts.append(json.dumps(json.loads(args), ensure_ascii=False))
                parts += [str(v) for v in json.loads(args).values()]
            except (ValueError, AttributeError):
                pass
    return "\n".join(parts)


def recall(view: list[dict] | None, evidence: list[dict]) -> float:
    if view is None:
        return 0.0
    text = visible_text(view)
    return sum(e["text"] in text for e in evidence) / len(evidence)


def prefix_share(before: list[dict], after: list[dict]) -> float:
    """Share of `before`, serialised, that is an exact prefix of `after`."""
    a = [canonical_json(m) for m in before]
    b = [canonical_json(m) for m in after]
    total = sum(len(s) for s in a)
    same = 0
    for x, y in zip(a, b, strict=False):
        if x == y:
            same += len(x)
            continue
        n = 0
        while n < min(len(x), len(y)) and x[n] == y[n]:
            n += 1
        same += n
        break
    return same / total if total else 1.0


# --- one run --------------------------------------------------------------------------------


@dataclass
class Case:
    trajectory: str
    kind: str
    method: str
    budget: int
    tokens_in: int
    tokens_out: int
    recall: float
    missed: list[str]
    fits: bool
    rejected: bool
    turns: int
    invalid_turns: int
    invalid_example: str | None
    recall_round: float | None = None  # evidence recall after one ctxproxy_recall round
    reuse: list[float] = field(default_factory=list)
    reuse_quiet: list[float] = field(default_factory=list)
    ms: list[float] = field(default_factory=list)


def run_case(t: Trajectory, name: str, method: Method, budget: int) -> Case:
    counter = TokenCounter()  # one per session: warm caches across turns, as in a running proxy
    tokens = lambda ms: counter.estimate_request(ms, None)  # noqa: E731
    prev: Outcome | None = None
    reuse, quiet, times, invalid, example = [], [], [], 0, None
    for end in request_points(t.messages):
        out = method(t.messages[:end], budget, counter)
        times.append(out.ms)
        bad = problems(out.messages) if out.messages is not None else []
        invalid += bool(bad)
        example = example or (bad[0] if bad else None)
        if prev and prev.messages is not None and out.messages is not None:
            share = prefix_share(prev.messages, out.messages)
            reuse.append(share)
            if not out.fresh:
                quiet.append(share)
        prev = out
    final = prev.messages if prev else None
    found = visible_text(final) if final is not None else ""
    return Case(
        t.id,
        t.kind,
        name,
        budget,
        tokens(t.messages),
        tokens(final) if final is not None else 0,
        recall(final, t.evidence),
        [e["text"][:80] for e in t.evidence if e["text"] not in found],
        final is not None and tokens(final) <= budget,
        final is None,
        len(times),
        invalid,
        example,
        recall_round(final, t, budget, counter) if name.startswith("default") else None,
        reuse,
        quiet,
        times,
    )


def recall_round(
    view: list[dict] | None, t: Trajectory, budget: int, counter: TokenCounter
) -> float | None:
    """Evidence recall once the model has made one round of ctxproxy_recall calls: for each
    evidence string the view lost, one call with the pointer to the message that held it (the
    placeholder's /messages/<id> where the view has one, else the marker's history:<n>),
    answered by the proxy's own recall code within what the budget leaves (at most 2,000
    tokens a call). The model is taken to pick the right pointer: this measures what the
    pointers and caps give back, not a model's choice."""
    if view is None:
        return None
    text = visible_text(view)
    missed = [e["text"] for e in t.evidence if e["text"] not in text]
    hashes = [message_hash(m) for m in t.messages]
    used = counter.count_messages(view)
    got: list[str] = []
    for needle in missed:
        where = [i for i, m in enumerate(t.messages) if needle in visible_text([m])]
        if not where or any(needle in g for g in got):
            continue
        ref = original_ref(t.messages[where[-1]])
        ref = ref if ref in text else f"history:{where[-1]}"
        room = min(2000, budget - used - 32)
        answer = recall_tool.run(json.dumps({"ref": ref}), t.messages, hashes, room, counter.text)
        used += answer.tokens + 32
        got.append(answer.text)
    seen = text + "\n".join(got)
    return sum(e["text"] in seen for e in t.evidence) / len(t.evidence)


def summarise(cases: list[Case]) -> dict:
    over = [c for c in cases if c.tokens_in > c.budget]
    pct = lambda xs, q: sorted(xs)[min(len(xs) - 1, int(q * len(xs)))] if xs else None  # noqa: E731
    mean = lambda xs: statistics.fmean(xs) if xs else None  # noqa: E731
    ms = [m for c in cases for m in c.ms]
    turns = sum(c.turns for c in cases)
    return {
        "n": len(over),
        # a rejected request sends nothing: no reduction to speak of, and recall 0
        "reduction": mean([1 - c.tokens_out / c.tokens_in for c in over if not c.rejected]),
        "recall": mean([c.recall for c in over]),
        # the cases that lost evidence: recall as compiled, then after one recall round
        "lost": sum(c.recall < 1 for c in over if c.recall_round is not None),
        "lost_recall": mean(
            [c.recall for c in over if c.recall_round is not None and c.recall < 1]
        ),
        "lost_after_round": mean(
            [c.recall_round for c in over if c.recall_round is not None and c.recall < 1]
        ),
        "recall_round": mean([c.recall_round for c in over if c.recall_round is not None]),
        "validity": 1 - sum(c.invalid_turns for c in cases) / turns if turns else None,
        "fits": mean([float(c.fits) for c in over]),
        "rejected": sum(c.rejected for c in over),
        "reuse": mean([r for c in over for r in c.reuse]),
        "reuse_quiet": mean([r for c in over for r in c.reuse_quiet]),
        "ms_p50": statistics.median(ms) if ms else None,
        "ms_p95": pct(ms, 0.95),
    }


def fmt(v, spec: str = ".2f") -> str:
    return "–" if v is None else format(v, spec)


def table(rows: list[dict], notes: dict[str, str]) -> str:
    head = (
        f"{'method':18} {'budget':>6} {'n':>3} {'reduct':>7} {'recall':>7} {'valid':>6} "
        f"{'fits':>5} {'rej':>4} {'reuse':>6} {'quiet':>6} {'ms p50':>8} {'ms p95':>8}"
    )
    lines = [head, "-" * len(head)]
    for r in rows:
        s = r["summary"]
        lines.append(
            f"{r['method']:18} {r['budget']:>6} {s['n']:>3} {fmt(s['reduction'], '.1%'):>7} "
            f"{fmt(s['recall'], '.3f'):>7} {fmt(s['validity'], '.1%'):>6} "
            f"{fmt(s['fits'], '.0%'):>5} {s['rejected']:>4} {fmt(s['reuse'], '.3f'):>6} "
            f"{fmt(s['reuse_quiet'], '.3f'):>6} {fmt(s['ms_p50'], '.2f'):>8} "
            f"{fmt(s['ms_p95'], '.2f'):>8}"
        )
    lines += [f"  {peer}: {note}" for peer, note in notes.items()]
    rounds = [r for r in rows if r["summary"].get("recall_round") is not None]
    if rounds:
        lines += ["", "after one ctxproxy_recall round (the pointer to each lost string):"]
        lines.append(
            f"{'method':18} {'budget':>6} {'lost':>5} {'before':>7} {'after':>7} {'all':>7}"
        )
        for r in rounds:
            s = r["summary"]
            lines.append(
                f"{r['method']:18} {r['budget']:>6} {s['lost']:>5} "
                f"{fmt(s['lost_recall'], '.3f'):>7} {fmt(s['lost_after_round'], '.3f'):>7} "
                f"{fmt(s['recall_round'], '.3f'):>7}"
            )
    return "\n".join(lines)


def verdict(rows: list[dict], ours: str = "default") -> list[str]:
    """The issue's goals, checked on the default pipeline, one line each."""
    mine = [r for r in rows if r["method"] == ours]
    out = []
    for r in mine:
        s = r["summary"]
        ok = (s["recall"] or 0) >= 0.95 and (s["reduction"] or 0) >= 0.70
        out.append(
            f"goal recall>=0.95 at reduction>=70% @ {r['budget']}: "
            f"{'met' if ok else 'NOT met'} (recall {fmt(s['recall'], '.3f')}, "
            f"reduction {fmt(s['reduction'], '.1%')})"
        )
    valid = all((r["summary"]["validity"] or 0) == 1 for r in mine)
    out.append(f"goal 100% validity: {'met' if valid else 'NOT met'}")
    quiet = [r["summary"]["reuse_quiet"] for r in mine if r["summary"]["reuse_quiet"] is not None]
    out.append(
        f"goal prefix reuse>=0.9 on turns without a new compaction: "
        f"{'met' if quiet and min(quiet) >= 0.9 else 'NOT met'} (min {fmt(min(quiet or [0]))})"
    )
    for r in mine:
        peers = [p for p in rows if p["budget"] == r["budget"] and p["method"] in PEERS]
        for p in peers:
            s, q = r["summary"], p["summary"]
            if s["recall"] is None or q["recall"] is None:
                continue
            gap = s["reduction"] - q["reduction"]
            if abs(gap) <= 0.05:  # equal reduction, within 5 points: recall decides
                word = "ahead" if s["recall"] >= q["recall"] else "BEHIND"
            elif gap > 0 and s["recall"] >= q["recall"]:
                word = "ahead (more reduction and recall)"
            else:
                word = "not at equal reduction"
            out.append(
                f"vs {p['method']} @ {r['budget']}: {word} (recall {s['recall']:.3f} vs "
                f"{q['recall']:.3f}, reduction {s['reduction']:.1%} vs {q['reduction']:.1%})"
            )
    return out


def plot(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5.5))
    for name in dict.fromkeys(r["method"] for r in rows):
        pts = [
            (r["summary"]["reduction"], r["summary"]["recall"], r["budget"])
            for r in rows
            if r["method"] == name
            and None not in (r["summary"]["recall"], r["summary"]["reduction"])
        ]
        if not pts:
            continue
        style = "--" if name in PEERS else "-"
        ax.plot([p[0] for p in pts], [p[1] for p in pts], style, marker="o", label=name)
        for x, y, b in pts:
            ax.annotate(
                f"{b // 1000}k", (x, y), fontsize=7, xytext=(3, 3), textcoords="offset pixels"
            )
    ax.axhline(0.95, color="grey", lw=0.6)
    ax.axvline(0.70, color="grey", lw=0.6)
    ax.set_xlabel("token reduction (final turn, over-budget trajectories)")
    ax.set_ylabel("evidence recall")
    ax.set_title("Compression quality: recall vs reduction per method and budget")
    ax.legend(fontsize=8, loc="lower left")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--budgets", default="4000,8000,16000")
    ap.add_argument("--variants", type=int, default=4, help="runs per coding scenario")
    ap.add_argument("--bfcl", type=int, default=12, help="BFCL multi-turn tasks")
    ap.add_argument("--peers", default=",".join(PEERS), help="comma list, or '' for none")
    ap.add_argument("--methods", default="", help="comma list of method names to run (all)")
    ap.add_argument("--no-install", action="store_true", help="use peers' venvs if present")
    ap.add_argument("--rebuild", action="store_true", help="rebuild the corpus")
    ap.add_argument("--kinds", default="", help="comma list of coding scenarios (all)")
    ap.add_argument("--quick", action="store_true", help="1 variant, 2 BFCL tasks, 4k only")
    ap.add_argument("--out", type=Path, default=RESULTS)
    ap.add_argument("--no-progress", action="store_true")
    ap.add_argument("--keep", action="store_true", help="planted and misleading sessions only")
    argv = sys.argv[1:] if argv is None else argv
    if "--keep" in argv:  # bench/keep.py: what the last view keeps of statements and evidence
        from bench import keep

        keep.main([a for a in argv if a != "--keep"])
        return {}
    args = ap.parse_args(argv)
    if args.quick:
        args.variants, args.bfcl, args.budgets = 1, 2, "4000"
    budgets = [int(b) for b in args.budgets.split(",")]
    kinds = [k for k in args.kinds.split(",") if k] or None
    corpus = load_corpus(args.variants, args.bfcl, rebuild=args.rebuild, kinds=kinds)
    peers = [p for p in args.peers.split(",") if p]
    runs, notes, workers = methods(peers, install=not args.no_install)
    if args.methods:
        runs = {k: v for k, v in runs.items() if k in args.methods.split(",")}
    jobs = [(n, m, b, t) for n, m in runs.items() for b in budgets for t in corpus]
    try:
        from tqdm import tqdm

        bar = tqdm(jobs, disable=args.no_progress, unit="traj", file=sys.stderr)
    except ImportError:
        bar = jobs
    cases = []
    started = time.perf_counter()
    try:
        for name, method, budget, t in bar:
            cases.append(run_case(t, name, method, budget))
    finally:
        for w in workers:
            w.close()
    rows = [
        {
            "method": name,
            "budget": b,
            "summary": summarise([c for c in cases if c.method == name and c.budget == b]),
        }
        for name in runs
        for b in budgets
    ]
    text = table(rows, notes)
    checks = verdict(rows)
    print(text)
    print("\n".join(checks))
    args.out.mkdir(parents=True, exist_ok=True)
    result = {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": f"{platform.node()} {platform.machine()} {platform.python_version()}",
        "seconds": round(time.perf_counter() - started, 1),
        "corpus": {
            "trajectories": len(corpus),
            "by_kind": {k: sum(t.kind == k for t in corpus) for k in {t.kind for t in corpus}},
        },
        "notes": notes,
        "rows": rows,
        "checks": checks,
        "cases": [{k: v for k, v in c.__dict__.items() if k != "ms"} for c in cases],
    }
    (args.out / "quality.json").write_text(json.dumps(result, indent=1))
    (args.out / "quality.txt").write_text(text + "\n" + "\n".join(checks) + "\n")
    plot(rows, args.out / "quality.png")
    print(f"wrote {args.out / 'quality.json'}, quality.png ({result['seconds']} s)")
    return result


if __name__ == "__main__":
    main()
