"""What the last view keeps of planted statements, and of real evidence under misleading words.

Each session is compiled turn by turn as a client sends it (ctxproxy from its stored state,
peers on the whole history). Planted sessions: share of the 20 statements whose newest value
is in the final view, and whether the rule given right after the task is. Misleading
sessions: share of the probes (newest failing tests, their `E` line, the exception line, the
failing frame) in the final view. Every turn: refused, over the window, invalid.
Run from the repository root: python -m bench.keep  (or python -m bench.quality --keep)
"""

from __future__ import annotations

import argparse
import statistics

from bench import quality
from bench.planted import misleading_session, planted_session
from proxy.compile.tokens import TokenCounter
from strategies.pipeline import request_points

Sessions = list[tuple[str, list[dict], list[str], str | None]]  # id, messages, probes, rule


def drive(messages: list[dict], method: quality.Method, budget: int) -> dict:
    """Every request point in turn; the final view's text and what went wrong on the way."""
    counter = TokenCounter()
    refused = over = invalid = 0
    final = None
    for end in request_points(messages):
        out = method(messages[:end], budget, counter)
        if out.messages is None:
            refused += 1
            continue
        over += counter.estimate_request(out.messages, None) > budget
        invalid += bool(quality.problems(out.messages))
        final = out.messages
    text = quality.visible_text(final) if final else ""
    return {"text": text, "refused": refused, "over": over, "invalid": invalid}


def score(sessions: Sessions, name: str, method: quality.Method, budget: int) -> dict:
    kept, rules, refused, over, invalid = [], [], 0, 0, 0
    for _, messages, probes, rule in sessions:
        got = drive(messages, method, budget)
        kept.append(sum(p in got["text"] for p in probes) / len(probes))
        if rule is not None:
            rules.append(rule in got["text"])
        refused, over = refused + got["refused"], over + got["over"]
        invalid += got["invalid"]
    return {
        "method": name,
        "budget": budget,
        "kept": statistics.median(kept),
        "kept_min": min(kept),
        "rule": f"{sum(rules)}/{len(rules)}" if rules else "–",
        "refused": refused,
        "over": over,
        "invalid": invalid,
    }


def planted(seeds: int, agentic: bool) -> Sessions:
    out: Sessions = []
    for s in range(seeds):
        p = planted_session(s, agentic=agentic)
        out.append((p.id, p.messages, p.probes, p.rule_probe))
    return out


def misleading(seeds: int) -> Sessions:
    return [(f"misleading-{s}", *misleading_session(s), None) for s in range(seeds)]


def table(title: str, rows: list[dict]) -> str:
    head = f"{title}\n| method | window | kept (median) | kept (min) | rule after task |"
    head += " refused | over | invalid |\n|---|---|---|---|---|---|---|---|"
    lines = [
        f"| {r['method']} | {r['budget']:,} | {r['kept']:.2f} | {r['kept_min']:.2f} | "
        f"{r['rule']} | {r['refused']} | {r['over']} | {r['invalid']} |"
        for r in rows
    ]
    return "\n".join([head, *lines])


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=6)
    ap.add_argument("--windows", default="1536,2048,2560")
    ap.add_argument("--agent-windows", default="4096,8192")
    ap.add_argument("--peers", default="litellm", help="comma list, or '' for none")
    ap.add_argument("--methods", default="default,sliding_window")
    ap.add_argument("--sessions", default="chat,agentic,misleading")
    args = ap.parse_args(argv)
    runs, notes, workers = quality.methods([p for p in args.peers.split(",") if p], install=False)
    wanted = args.methods.split(",") + list(notes)
    runs = {k: v for k, v in runs.items() if k in wanted}
    try:
        for kind, title, sessions, windows in (
            ("chat", "Planted statements, chat-only", planted(args.seeds, False), args.windows),
            ("agentic", "Planted statements, agentic", planted(args.seeds, True), args.windows),
            ("misleading", "Misleading ERROR/FAILED words, agent", misleading(args.seeds),
             args.agent_windows),
        ):  # fmt: skip
            if kind not in args.sessions.split(","):
                continue
            rows = [
                score(sessions, name, method, int(w))
                for w in windows.split(",")
                for name, method in runs.items()
            ]
            print(table(title, rows), "\n", flush=True)
    finally:
        for w in workers:
            w.close()
    print("peers:", notes)


if __name__ == "__main__":
    main()
