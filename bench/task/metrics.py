"""One task-benchmark run's figures, and the table of medians per arm and model variant."""

from __future__ import annotations

import argparse
from collections import defaultdict
from dataclasses import dataclass, field

from bench import tabulate


@dataclass
class Run:
    arm: str
    variant: str
    seed: int
    status: str
    solved: bool
    steps: int
    rereads: int
    relists: int
    reruns: int
    recalls: int
    recalls_helped: int
    prompt_tokens: int
    recall_tokens: int
    over: int
    reuse: float
    seconds: float
    checks: dict[str, bool] = field(default_factory=dict)

    def failed(self) -> list[str]:
        bad = [FAILURES.get(k, k) for k, ok in self.checks.items() if not ok]
        status = next((v for k, v in STATUS.items() if self.status.startswith(k)), self.status)
        return ([status] if self.status != "done" else []) + bad

    def line(self) -> str:
        verdict = "solved" if self.solved else "NOT solved (" + ", ".join(self.failed()) + ")"
        return (
            f"{verdict}; {self.steps} steps, {self.rereads} re-reads, {self.relists} re-lists, "
            f"{self.reruns} re-runs, {self.recalls} recalls "
            f"({self.recalls_helped} helped), {self.prompt_tokens:,} prompt tokens, "
            f"reuse {self.reuse:.2f}, {self.seconds:.0f} s"
        )


FAILURES = {
    "tests pass": "tests fail",
    "tests untouched": "tests edited",
    "legacy untouched": "legacy edited",
    "signatures kept": "signature changed",
    "correction applied": "correction not applied",
}
STATUS = {"answered: I cannot see ": "task out of view", "error 400": "refused (over window)"}

HEADER = [
    "arm",
    "model reads",
    "solved",
    "steps",
    "x full",
    "re-reads",
    "re-lists",
    "test re-runs",
    "recalls (helped)",
    "prompt tok",
    "recall share",
    "prefix reuse",
    "same steps twice",
    "why not solved",
]


def report(runs: list[Run], args: argparse.Namespace) -> str:
    groups: dict[tuple[str, str], list[Run]] = defaultdict(list)
    for r in runs:
        groups[(r.arm, r.variant)].append(r)
    full = {v: tabulate.median(r.steps for r in rs) for (a, v), rs in groups.items() if a == "full"}
    rows = []
    for (arm, variant), rs in groups.items():
        steps = tabulate.median(r.steps for r in rs)
        tokens = sum(r.prompt_tokens for r in rs)
        why = sorted({w for r in rs for w in r.failed()})
        by_seed: dict[int, set[int]] = defaultdict(set)
        for r in rs:
            by_seed[r.seed].add(r.steps)
        twice = len(rs) > len(by_seed)
        rows.append(
            [
                arm,
                "system+user" if variant == "user-only" else "all text",
                f"{sum(r.solved for r in rs)}/{len(rs)}",
                tabulate.fmt(steps, 0),
                tabulate.ratio(steps, full.get(variant)),
                tabulate.fmt(tabulate.median(r.rereads for r in rs), 0),
                tabulate.fmt(tabulate.median(r.relists for r in rs), 0),
                tabulate.fmt(tabulate.median(r.reruns for r in rs), 0),
                f"{sum(r.recalls for r in rs)} ({sum(r.recalls_helped for r in rs)})",
                tabulate.fmt(tabulate.median(r.prompt_tokens for r in rs), 0),
                f"{sum(r.recall_tokens for r in rs) / tokens:.2f}" if tokens else "-",
                f"{tabulate.median(r.reuse for r in rs):.2f}",
                f"{sum(len(v) == 1 for v in by_seed.values())}/{len(by_seed)}" if twice else "-",
                ", ".join(why) or "-",
            ]
        )
    title = (
        f"Task benchmark: {args.bugs} planted bugs, 3 constraints, 1 correction; "
        f"{args.seeds} seed(s) per arm; medians per run (recalls: totals)\n"
        f"{tabulate.machine()}, {tabulate.now()}\n"
    )
    return title + tabulate.table(HEADER, rows, left=2)
