"""Statement benchmarks ctxproxy did not write, run through its compaction beside trim_messages.

- compactbench 0.1.0 (PyPI): the elite_practice suite's cases (elite difficulty), replayed turn
  by turn; each evaluation item scored by compactbench's own `run_check` on the last view's
  text. Items that check what must be present are the score; `forbidden_absent` items check a
  model's answer, not a context (a buried constraint's text is both required and forbidden),
  so they are shown apart. The suite's YAML files ship in compactbench's sdist, not its wheel:
  `--suite` points at them, or the sdist is fetched with pip into ~/.cache.
- conpact 0.1.0 (PyPI): its 15 side constraints, framed by its `render_sc` and put into a
  chat by its own `inject` (top, middle, multi); the haystack is compactbench's distractor
  chat (conpact's own haystacks are a 220k-token download). Kept: the constraint's text is
  in the last view.
ctxproxy runs as the route does (CompactionSettings defaults: reply reserve and margin);
LiteLLM's `trim_messages` gets the whole window as its max_tokens.
Run from the repository root: python -m bench.thirdparty [--windows 1536,2048,2560]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import statistics
import subprocess
import sys
import tarfile
from collections.abc import Callable
from pathlib import Path

from bench import quality
from proxy.compile.tokens import TokenCounter
from proxy.compile.view import compile_request
from proxy.settings import CompactionSettings
from strategies.pipeline import request_points

View = Callable[[list[dict], int], list[dict]]
CACHE = Path.home() / ".cache" / "ctxproxy-bench"


def suite_dir(given: str | None) -> Path:
    if given:
        return Path(given)
    root = CACHE / "compactbench-0.1.0"
    if not root.exists():
        CACHE.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--no-binary", ":all:",
             "-d", str(CACHE), "compactbench==0.1.0"],
            check=True,
        )  # fmt: skip
        with tarfile.open(CACHE / "compactbench-0.1.0.tar.gz") as tar:
            tar.extractall(CACHE, filter="data")
    return root / "benchmarks" / "public" / "elite_practice"


def ctxproxy_view() -> View:
    counter = TokenCounter()

    def view(messages: list[dict], window: int) -> list[dict]:
        prior, out = None, messages
        for end in request_points(messages):
            body = {"messages": json.loads(json.dumps(messages[:end]))}
            c = compile_request(
                body, window=window, settings=CompactionSettings(), counter=counter, prior=prior
            )
            prior, out = c.state, c.messages
        return out

    return view


def trim_view() -> View:
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # offline: its own copy
    from litellm.utils import trim_messages

    def view(messages: list[dict], window: int) -> list[dict]:
        return trim_messages(json.loads(json.dumps(messages)), model="gpt-4o", max_tokens=window)

    return view


def compactbench_cases(path: Path, seeds: int) -> list[tuple[str, list[dict], list[dict]]]:
    """(family, messages, evaluation items as dicts) per case."""
    from compactbench.dsl import DifficultyLevel, load_suite
    from compactbench.engine.generation import generate_case

    out = []
    for template in load_suite(path):
        for seed in range(seeds):
            case = generate_case(template, seed, DifficultyLevel.ELITE)
            msgs = [{"role": "system", "content": "You are a helpful assistant."}]
            msgs += [{"role": t.role.value, "content": t.content} for t in case.transcript.turns]
            items = [{"expected": e.expected} for e in case.evaluation_items]
            out.append((template.family, msgs, items))
    return out


def score_compactbench(cases, method: View, window: int) -> dict[str, tuple[float, float]]:
    """Family -> (mean of the retention items, mean of the forbidden_absent items)."""
    from compactbench.scoring.checks import run_check

    kept: dict[str, list[float]] = {}
    banned: dict[str, list[float]] = {}
    for family, msgs, items in cases:
        text = quality.visible_text(method(msgs, window))
        for item in items:
            spec = item["expected"]
            into = banned if spec.get("check") == "forbidden_absent" else kept
            into.setdefault(family, []).append(run_check(spec, text))
    return {
        f: (statistics.mean(kept.get(f, [1.0])), statistics.mean(banned.get(f, [1.0])))
        for f in sorted(kept)
    }


def conpact_cases(path: Path, seeds: int) -> list[tuple[list[dict], str]]:
    """conpact's side constraints injected by its own operator into a long distractor chat."""
    from compactbench.dsl import DifficultyLevel, load_suite
    from compactbench.engine.generation import generate_case
    from conpact.constraints import SCS, render_sc
    from conpact.generate import inject

    chat: list[dict] = []
    for n, template in enumerate(load_suite(path)):
        turns = generate_case(template, 100 + n, DifficultyLevel.ELITE).transcript.turns
        chat += [{"role": t.role.value, "content": t.content} for t in turns]
        chat.append({"role": "assistant", "content": "OK."})
    chat = [m for a, m in zip([None, *chat], chat, strict=False) if not a or a["role"] != m["role"]]
    out = []
    rng = random.Random(42)
    for seed in range(seeds):
        for position in ("top", "middle", "multi"):
            for sc in SCS:
                rendered = render_sc(sc["sc"], strict=bool(seed % 2), direct=True)
                msgs, _ = inject(chat, rendered, position, 3, rng)
                system = {"role": "system", "content": "You are a helpful assistant."}
                out.append(([system, *msgs, {"role": "user", "content": sc["probe"]}], rendered))
    return out


def _norm(text: str) -> str:
    return re.sub(r"\s+", " ", text.strip().lower())


def score_conpact(cases, method: View, window: int) -> float:
    hits = [_norm(sc) in _norm(quality.visible_text(method(m, window))) for m, sc in cases]
    return sum(hits) / len(hits)


def score_planted(seeds: int, method: View, window: int) -> float:
    """bench/planted.py's chat sessions (ours, for comparison): share of probes kept."""
    from bench.planted import planted_session

    kept = []
    for seed in range(seeds):
        p = planted_session(seed, agentic=False)
        text = quality.visible_text(method(p.messages, window))
        kept.append(sum(probe in text for probe in p.probes) / len(p.probes))
    return statistics.median(kept)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--windows", default="1536,2048,2560")
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--suite", default=None, help="compactbench's elite_practice directory")
    ap.add_argument("--only", default="compactbench,conpact,planted")
    args = ap.parse_args(argv)
    path = suite_dir(args.suite)
    methods = {"ctxproxy": ctxproxy_view(), "trim_messages": trim_view()}
    windows = [int(w) for w in args.windows.split(",")]
    if "compactbench" in args.only:
        cases = compactbench_cases(path, args.seeds)
        print(f"compactbench 0.1.0 elite_practice, {len(cases)} cases (elite)")
        print("| method | window | family | retention items | forbidden_absent items |")
        print("|---|---|---|---|---|")
        for w in windows:
            for name, method in methods.items():
                for family, (kept, banned) in score_compactbench(cases, method, w).items():
                    print(f"| {name} | {w:,} | {family} | {kept:.2f} | {banned:.2f} |", flush=True)
    if "conpact" in args.only:
        cases_c = conpact_cases(path, max(1, args.seeds // 2))
        print(f"\nconpact 0.1.0 side constraints, {len(cases_c)} cases (top, middle, multi)")
        print("| method | window | constraint kept |\n|---|---|---|")
        for w in windows:
            for name, method in methods.items():
                print(f"| {name} | {w:,} | {score_conpact(cases_c, method, w):.2f} |", flush=True)
    if "planted" in args.only:
        print("\nbench/planted.py chat sessions at the route's defaults (reply reserve, margin)")
        print("| method | window | statements kept (median) |\n|---|---|---|")
        for w in windows:
            for name, method in methods.items():
                kept = score_planted(args.seeds, method, w)
                print(f"| {name} | {w:,} | {kept:.2f} |", flush=True)


if __name__ == "__main__":
    main()
