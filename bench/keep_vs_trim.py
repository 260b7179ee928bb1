"""What each method keeps of what the next step needs, in the same room: ctxproxy beside
LiteLLM's `trim_messages` and a sliding window.

Every case of bench/shapes.py (user statements, tool trajectories, the planted-statement and
misleading sessions) goes through each method at 25% and 50% of the history's own tokens (and
at fixed budgets for the planted sessions): one-shot, the whole history at once (ctxproxy
through `POST /v1/compress`), and turn by turn (ctxproxy through the chat route to a scripted
upstream, each request the history up to that turn; the stateless baselines give the same view
either way). Per shape, budget and mode: the share of probes in the view sent upstream (a view
over the budget keeps nothing: the model server refuses it) and the view's fill (its tokens ÷
the budget). Every count is ctxproxy's estimate (cl100k), for every method alike.
Run from the repository root: python -m bench.keep_vs_trim  (--quick for a small run)
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import httpx
from fastapi.testclient import TestClient

from bench import shapes, tabulate
from proxy.app import create_app
from proxy.compile.tokens import TokenCounter
from proxy.settings import Settings
from strategies.pipeline import request_points

COUNTER = TokenCounter()
SHARES = (0.25, 0.5)
PLANTED_BUDGETS = (2048, 2560)  # the planted-statement goals' windows, turn by turn
SHAPES = ["statements", "long chat", "listing", "big result", "earlier values", "planted chat",
          "planted agentic", "misleading", "bfcl"]  # fmt: skip
View = list[dict]


def count(view: View) -> int:
    return COUNTER.estimate_request(view, None)


def visible(view: View) -> str:
    parts = []
    for m in view:
        content = m.get("content")
        if isinstance(content, list):
            parts += [str(p.get("text", "")) for p in content if isinstance(p, dict)]
        elif content is not None:
            parts.append(str(content))
        parts += [c.get("function", {}).get("arguments", "") for c in m.get("tool_calls") or []]
    return "\n".join(parts)


# --- the baselines ----------------------------------------------------------------------------


def sliding_window(messages: View, budget: int) -> View:
    """The system prompt and the newest messages that fit; never a tool result without its call."""
    system = [m for m in messages[:1] if m.get("role") in ("system", "developer")]
    rest = messages[len(system) :]
    kept: View = []
    for m in reversed(rest):
        if count([*system, m, *kept]) > budget:
            break
        kept.insert(0, m)
    while kept and kept[0].get("role") == "tool":
        kept.pop(0)
    return [*system, *kept]


def litellm_trim() -> tuple[Callable[[View, int], View], str]:
    """LiteLLM's trim_messages, offline, its output counted as every method's is and trimmed
    again while over (its own counter under-counts tool messages). It raises TypeError on a
    call's `content: None`, so it is given "" there: the same history, measured fairly."""
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    import importlib.metadata as md

    from litellm.utils import trim_messages

    def trim(messages: View, budget: int) -> View:
        ask = budget
        for _ in range(6):
            given = [{**m, "content": m.get("content") or ""} for m in messages]
            view = trim_messages(given, model="gpt-4o", max_tokens=ask)
            view = view[0] if isinstance(view, tuple) else view
            over = count(view) - budget
            if over <= 0:
                return view
            ask = max(ask - over - 8, 1)
        return view

    return trim, f"litellm {md.version('litellm')}"


# --- ctxproxy ---------------------------------------------------------------------------------


class Proxy:
    """ctxproxy in process on a fresh SQLite file, its upstream scripted (it answers "OK" and
    keeps what it was sent); no answer reserve or margin, so the budget is the window."""

    def __init__(self, wd: Path, window: int, headroom: float | None):
        self.sent: list[dict] = []
        compaction: dict[str, Any] = {"reserve_tokens": 0, "safety_margin": 0}
        if headroom is not None:
            compaction["headroom"] = headroom
        settings = Settings(
            database_url=f"sqlite:///{wd / f'{window}.db'}",
            upstreams=[{"name": "up", "kind": "openai", "base_url": "http://up.test/v1",
                        "context_window": window}],
            compaction=compaction,
            log_level="warning",
        )  # fmt: skip
        app = create_app(settings, transport=httpx.MockTransport(self._answer))
        self.client = TestClient(app, base_url="http://localhost")
        self.client.__enter__()

    def _answer(self, request: httpx.Request) -> httpx.Response:
        self.sent.append(json.loads(request.content))
        message = {"role": "assistant", "content": "OK"}
        return httpx.Response(200, json={"id": "x", "object": "chat.completion", "model": "m",
                                         "choices": [{"index": 0, "message": message,
                                                      "finish_reason": "stop"}]})  # fmt: skip

    def compress(self, messages: View, budget: int, session: str) -> View | None:
        body = {"model": "m", "context_window": budget, "messages": messages}
        r = self.client.post("/v1/compress", json=body, headers={"x-session-id": session})
        return r.json()["messages"] if r.status_code == 200 else None

    def chat(self, messages: View, session: str) -> View | None:
        """Every request point in turn; the view forwarded at the last one."""
        last = None
        for end in request_points(messages):
            self.sent.clear()
            body = {"model": "m", "messages": messages[:end]}
            r = self.client.post("/v1/chat/completions", json=body,
                                 headers={"x-session-id": session})  # fmt: skip
            last = self.sent[-1]["messages"] if r.status_code == 200 and self.sent else None
        return last

    def close(self) -> None:
        self.client.__exit__(None, None, None)


# --- one run ----------------------------------------------------------------------------------


@dataclass
class Row:
    shape: str
    case: str
    budget: int
    share: str  # "25%", "50%" or the fixed budget
    mode: str  # one-shot | turn by turn
    method: str
    kept: float
    fill: float
    over: bool
    kept_if_sent: float  # the probes in the view even when it is over the budget


def score(case: shapes.Case, view: View | None, budget: int) -> tuple[float, float, bool, float]:
    if view is None:
        return 0.0, 0.0, False, 0.0
    tokens = count(view)
    over = tokens > budget
    text = visible(view)
    there = sum(p in text for p in case.probes) / len(case.probes)
    return (0.0 if over else there), tokens / budget, over, there


def budgets(case: shapes.Case) -> list[tuple[str, int]]:
    total = count(case.messages)
    out = [(f"{int(s * 100)}%", int(total * s)) for s in SHARES]
    if case.shape.startswith("planted"):
        out += [(f"{b:,}", b) for b in PLANTED_BUDGETS]
    return out


def run_case(
    case: shapes.Case, wd: Path, modes: list[str], trim: Callable | None, headroom: float | None
) -> list[Row]:
    rows = []
    for share, budget in budgets(case):
        views: dict[tuple[str, str], View | None] = {}
        proxy = Proxy(wd, budget, headroom)
        try:
            if "one-shot" in modes:
                views["one-shot", "ctxproxy"] = proxy.compress(
                    case.messages, budget, f"{case.id}-1"
                )
            if "turn by turn" in modes:
                views["turn by turn", "ctxproxy"] = proxy.chat(case.messages, f"{case.id}-t")
        finally:
            proxy.close()
        for mode in modes:  # the baselines are stateless: one view serves both modes
            views[mode, "sliding window"] = sliding_window(case.messages, budget)
            if trim is not None:
                views[mode, "trim"] = trim(case.messages, budget)
        for (mode, method), view in views.items():
            rows.append(
                Row(case.shape, case.id, budget, share, mode, method, *score(case, view, budget))
            )
    return rows


def summary(rows: list[Row]) -> list[dict[str, Any]]:
    groups: dict[tuple[str, str, str, str], list[Row]] = {}
    for r in rows:
        groups.setdefault((r.shape, r.share, r.mode, r.method), []).append(r)
    return [
        {"shape": k[0], "budget": k[1], "mode": k[2], "method": k[3],
         "kept": sum(r.kept for r in g) / len(g), "fill": sum(r.fill for r in g) / len(g),
         "over": sum(r.over for r in g), "cases": len(g),
         "kept_if_sent": sum(r.kept_if_sent for r in g) / len(g)}
        for k, g in groups.items()
    ]  # fmt: skip


def table(summ: list[dict[str, Any]]) -> str:
    by: dict[tuple[str, str, str], dict[str, dict]] = {}
    for s in summ:
        by.setdefault((s["shape"], s["budget"], s["mode"]), {})[s["method"]] = s
    header = ["shape", "budget", "mode", "ctxproxy kept", "trim kept", "window kept",
              "ctxproxy fill", "trim fill", "window fill", "ctxproxy - trim",
              "trim over"]  # fmt: skip
    out = []
    for (shape, budget, mode), m in by.items():
        c, t, w = m.get("ctxproxy"), m.get("trim"), m.get("sliding window")

        def pct(x: dict | None, key: str = "kept") -> str:
            return "-" if x is None else f"{x[key]:.0%}" if key == "kept" else f"{x[key]:.2f}"

        gap = f"{(c['kept'] - t['kept']) * 100:+.0f} pts" if c and t else "-"
        over = f"{t['over']}/{t['cases']}" if t else "-"
        out.append([shape, budget, mode, pct(c), pct(t), pct(w), pct(c, "fill"), pct(t, "fill"),
                    pct(w, "fill"), gap, over])  # fmt: skip
    return tabulate.table(header, out, left=3)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--shapes", default=",".join(SHAPES))
    ap.add_argument("--modes", default="one-shot,turn by turn")
    ap.add_argument("--headroom", type=float, default=None, help="compaction.headroom for chat")
    ap.add_argument("--no-trim", action="store_true", help="without LiteLLM")
    ap.add_argument("--quick", action="store_true", help="one seed, statements and big result")
    ap.add_argument("--no-progress", action="store_true")
    ap.add_argument("--out", type=Path, default=tabulate.RESULTS)
    args = ap.parse_args(argv)
    if args.quick:
        args.seeds, args.shapes = 1, "statements,big result"
    trim, version = (None, "not run") if args.no_trim else litellm_trim()
    modes = args.modes.split(",")
    todo = shapes.cases(args.seeds, args.shapes.split(","))
    rows: list[Row] = []
    from tqdm import tqdm

    with tempfile.TemporaryDirectory() as tmp:
        for case in tqdm(todo, desc="cases", disable=args.no_progress):
            rows += run_case(case, Path(tmp), modes, trim, args.headroom)
    summ = summary(rows)
    print(f"\n{tabulate.machine()}; trim: {version}; seeds {args.seeds}\n")
    print(table(summ))
    over = [f"{r.case} {r.share}" for r in rows if r.method == "trim" and r.over]
    print("trim's views over the budget:", ", ".join(dict.fromkeys(over)) or "none")
    data = {"when": tabulate.now(), "trim": version, "seeds": args.seeds, "summary": summ,
            "rows": [asdict(r) for r in rows]}  # fmt: skip
    print("wrote", tabulate.write_json("keep_vs_trim", data, args.out))
    return data


if __name__ == "__main__":
    main()
