"""The work a compile does, counted rather than timed (a loaded machine moves seconds, not counts):
messages counted by tiktoken and their characters, validity checks, Python function calls; and
a digest of every view, so a change to the compile's cost can show it changed no byte.

Histories: bench/shapes' cases (seed 0) at 25% and 50% of their tokens, one-shot as
/v1/compress compiles them (headroom 0) and turn by turn with the stored state as chat does
(the default headroom), and bench/sessions' long agent session turn by turn at 4k and 8k.
`--record FILE` adds the digests to those the file holds, `--check FILE` compares with them
(exit 1 on a change).
`--fixed setup|run`: a fixed input for `valgrind --tool=callgrind` (see fixed_input).
Run from the repository root: python -m bench.compile_work [--quick] [--record|--check FILE]
"""

from __future__ import annotations

import argparse
import cProfile
import hashlib
import json
import pstats
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench import sessions, shapes, tabulate
from proxy.compile.tokens import TokenCounter
from proxy.compile.view import compile_request
from proxy.settings import CompactionSettings
from strategies import invariants
from strategies.pipeline import request_points

SHAPES = ("statements", "listing", "big result", "earlier values", "planted chat", "misleading")
SHARES = (0.25, 0.5)


@dataclass
class Work:
    encoded: int = 0  # texts tiktoken encoded (a token count that missed every cache)
    chars: int = 0  # their characters
    checks: int = 0  # validity checks of a view (invariants.Gate.check)
    calls: int = 0  # Python function calls (cProfile's count)
    digests: dict[str, str] = field(default_factory=dict)


@contextmanager
def counted(work: Work) -> Iterator[None]:
    """Count tiktoken's encodes and the validity checks while inside."""
    text, check = TokenCounter.text, invariants.Gate.check

    def counting_text(self: TokenCounter, t: str) -> int:
        work.encoded += 1
        work.chars += len(t)
        return text(self, t)

    def counting_check(*args: Any) -> None:
        work.checks += 1
        check(*args)

    TokenCounter.text = counting_text  # type: ignore[method-assign]
    invariants.Gate.check = counting_check  # type: ignore[method-assign]
    try:
        yield
    finally:
        TokenCounter.text = text  # type: ignore[method-assign]
        invariants.Gate.check = check  # type: ignore[method-assign]


def digest(view: list[dict]) -> str:
    return hashlib.sha256(json.dumps(view, sort_keys=True).encode()).hexdigest()[:16]


def turns(messages: list[dict], ends: list[int], window: int, settings: CompactionSettings,
          counter: TokenCounter) -> list[list[dict]]:  # fmt: skip
    """The view of each request point, each from the previous turn's state (as chat does)."""
    prior, views = None, []
    for end in ends:
        body = json.loads(json.dumps({"messages": messages[:end]}))
        compiled = compile_request(body, window=window, settings=settings, counter=counter,
                                   prior=prior)  # fmt: skip
        prior = compiled.state
        views.append(compiled.messages)
    return views


def jobs(quick: bool) -> Iterator[tuple[str, Callable[[TokenCounter], list[list[dict]]]]]:
    """(name, compile) for each history and way of sending it."""
    oneshot = CompactionSettings(reserve_tokens=0, safety_margin=0, headroom=0.0)
    chat = CompactionSettings(reserve_tokens=0, safety_margin=0)
    for case in shapes.cases(1, list(SHAPES)):  # seed 0
        total = TokenCounter().count_messages(case.messages)
        for share in SHARES:
            budget = int(total * share)
            name = f"{case.id} {share:.0%}"
            body = {"messages": case.messages}

            def one(c: TokenCounter, b: int = budget, body: dict = body) -> list[list[dict]]:
                body = json.loads(json.dumps(body))
                return [compile_request(body, window=b, settings=oneshot, counter=c).messages]

            yield f"{name} one-shot", one
            if quick and case.shape == "statements":
                continue
            ends = request_points(case.messages)
            yield (
                f"{name} turn by turn",
                lambda c, m=case.messages, e=ends, b=budget: turns(m, e, b, chat, c),
            )
    n = 60 if quick else 150
    session = sessions.build_session(n)
    ends = sessions.request_turns(session, n)
    for window in (4096, 8192):
        yield (
            f"session {n} turns {window}",
            lambda c, w=window: turns(session, ends, w, CompactionSettings(), c),
        )


def measure(quick: bool) -> Work:
    work = Work()
    profile = cProfile.Profile()
    for name, job in jobs(quick):
        counter = TokenCounter()
        counter.text("warm")  # tiktoken's lazy set-up is not the compile's work
        with counted(work):
            profile.enable()
            views = job(counter)
            profile.disable()
        for i, view in enumerate(views):
            work.digests[f"{name} #{i}"] = digest(view)
    work.calls = pstats.Stats(profile).total_calls  # type: ignore[attr-defined]
    return work


def fixed_input(setup_only: bool) -> str:
    """A fixed input to run under `valgrind --tool=callgrind` (instructions, not seconds): the
    shapes one-shot at 25% and 50%, then turns 101-120 of the 4k session from the state of
    turn 100. `setup_only` stops after the setup (subtract its count). The views' digest."""
    oneshot = CompactionSettings(reserve_tokens=0, safety_margin=0, headroom=0.0)
    cases = shapes.cases(1, list(SHAPES))
    session = sessions.build_session(120)
    bodies = [
        json.dumps({"messages": session[:end]}) for end in sessions.request_turns(session, 120)
    ]
    counter, prior, out = TokenCounter(), None, hashlib.sha256()
    for case in cases:
        counter.count_messages(case.messages)  # the raw counts, as a running proxy has them
    for body in bodies[:100]:
        prior = compile_request(json.loads(body), window=4096, settings=CompactionSettings(),
                                counter=counter, prior=prior).state  # fmt: skip
    if setup_only:
        return ""
    for case in cases:
        total = counter.count_messages(case.messages)
        for share in SHARES:
            view = compile_request({"messages": list(case.messages)}, window=int(total * share),
                                   settings=oneshot, counter=counter).messages  # fmt: skip
            out.update(json.dumps(view, sort_keys=True).encode())
    for body in bodies[100:]:
        compiled = compile_request(json.loads(body), window=4096, settings=CompactionSettings(),
                                   counter=counter, prior=prior)  # fmt: skip
        prior = compiled.state
        out.update(json.dumps(compiled.messages, sort_keys=True).encode())
    return out.hexdigest()[:16]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="60-turn session, fewer chat runs")
    ap.add_argument("--record", type=Path, help="write the views' digests to this file")
    ap.add_argument("--check", type=Path, help="compare the views' digests with this file")
    ap.add_argument("--fixed", choices=["setup", "run"], help="only the callgrind input")
    args = ap.parse_args(argv)
    if args.fixed:
        print(f"views digest {fixed_input(args.fixed == 'setup') or '-'}")
        return 0
    from strategies.budget import SHARED

    SHARED.clear()
    work = measure(args.quick)
    rows = [["texts encoded", f"{work.encoded:,}"], ["characters encoded", f"{work.chars:,}"],
            ["validity checks", f"{work.checks:,}"], ["Python calls", f"{work.calls:,}"],
            ["views", f"{len(work.digests):,}"]]  # fmt: skip
    print(tabulate.table(["work", "count"], rows))
    if args.record:
        kept = json.loads(args.record.read_text()) if args.record.exists() else {}
        kept.update(work.digests)  # a --quick run's views join a full run's in one file
        args.record.write_text(json.dumps(kept, indent=1, sort_keys=True) + "\n")
        print(f"wrote {len(work.digests)} digests to {args.record} ({len(kept)} in all)")
    if args.check:
        known = json.loads(args.check.read_text())
        changed = sorted(k for k in work.digests if k in known and known[k] != work.digests[k])
        compared = sum(k in known for k in work.digests)
        print(f"same bytes: {compared - len(changed)} of {compared} views")
        for k in changed[:20]:
            print(f"  changed: {k}")
        return 1 if changed or not compared else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
