"""Where a long session's prefix reuse is lost: per firing, where the prompt first changes.

In process, as the route compiles (each turn from the previous turn's stored state, the recall
tool offered, estimates corrected by bench.sessions' 1.1 upstream tokens per cl100k token), the
150-turn session of bench.sessions. For each turn whose view is not the previous one with
messages appended it finds the first changed message and counts the previous prompt's tokens
from that message on, by what changed there: the marker rewritten or moved, a message before
it in a new form (a fold, a cut, a fill), a step dropped. It also
prints two bounds: the reuse if every change began at the marker, and if the marker and all
before it always stayed. Deterministic figures only.
Run from the repository root: python -m bench.reuse_loss [--windows 4096 8192]
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from typing import Any

from bench import tabulate
from bench.sessions import INFLATE, build_session, prefix_reuse, render, request_turns
from strategies.compact import MARKER


def _has_marker(m: dict) -> bool:
    return MARKER in str(m.get("content"))


def cause(prev: list[dict], view: list[dict], j: int, keys: set[str]) -> str:
    a, b = prev[j], view[j] if j < len(view) else {}
    old, new = _has_marker(a), _has_marker(b)
    if old and new:
        return "marker rewritten"
    if new:
        return "marker where a step was"
    if old:
        return "marker moved later"
    if json.dumps(b, sort_keys=True) not in keys:
        return f"{b.get('role')} before the marker in a new form"
    return f"{a.get('role')} dropped"


def measure(window: int, turns: int) -> dict[str, Any]:
    from proxy.compile.tokens import TokenCounter
    from proxy.compile.view import compile_request
    from proxy.recall.tool import with_tool
    from proxy.settings import CompactionSettings

    session = build_session(turns)
    settings = CompactionSettings()
    counter, prior, prev = TokenCounter().corrected(INFLATE), None, None
    prompts, lost, count = [], Counter[str](), Counter[str]()
    at_marker = after_marker = 0

    def tokens(ms: list[dict]) -> int:
        return sum(counter.text(render([m])) for m in ms)

    for end in request_turns(session, turns):
        body = with_tool(json.loads(json.dumps({"messages": session[:end]})))
        compiled = compile_request(
            body, window=window, settings=settings, counter=counter, prior=prior
        )
        prior, view = compiled.state, compiled.messages
        prompts.append(render(view, body.get("tools")))
        if prev is not None:
            keys = [json.dumps(m, sort_keys=True) for m in prev]
            new = [json.dumps(m, sort_keys=True) for m in view]
            pairs = enumerate(zip(keys, new, strict=False))
            j = next((i for i, (a, b) in pairs if a != b), min(len(keys), len(new)))
            if j < len(prev):
                why, gone = cause(prev, view, j, set(keys)), tokens(prev[j:])
                count[why] += 1
                lost[why] += gone
                mi = max((i for i, m in enumerate(prev) if _has_marker(m)), default=-1)
                at_marker += tokens(prev[mi:]) if 0 <= mi and j < mi else gone
                after_marker += tokens(prev[mi + 1 :]) if 0 <= mi and j <= mi else gone
        prev = view
    total = sum(counter.text(p) for p in prompts[:-1])
    return {
        "window": window,
        "reuse": prefix_reuse(prompts),
        "firings": sum(count.values()),
        "turns": turns,
        "causes": {k: (count[k], lost[k]) for k in count},
        "bound_at_marker": 1 - at_marker / total,
        "bound_after_marker": 1 - after_marker / total,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--windows", type=int, nargs="+", default=[4096, 8192])
    ap.add_argument("--turns", type=int, default=150)
    args = ap.parse_args(argv)
    for window in args.windows:
        r = measure(window, args.turns)
        print(
            f"{window:,}: prefix reuse {r['reuse']:.3f}, {r['firings']} of {r['turns']} turns "
            f"changed the prompt; bounds: {r['bound_at_marker']:.3f} if every change began at "
            f"the marker, {r['bound_after_marker']:.3f} if the marker and all before it stayed"
        )
        rows = [
            [why, str(n), f"{gone:,}", f"{gone // n:,}"]
            for why, (n, gone) in sorted(r["causes"].items(), key=lambda kv: -kv[1][1])
        ]
        print(tabulate.table(["first change", "firings", "tokens lost", "per firing"], rows))
        print()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
