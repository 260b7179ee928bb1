"""How long `ctxproxy replay` takes on a long session: a Codex-shaped rollout of N turns (a
shell call and its pytest output each, as the real CLI writes them) replayed by the command
line, alone and with --set, and a stored session of N requests; and a folder of sessions.
Wall and CPU time of the whole process.

    python -m bench.replay_time [--turns 500] [--window 32768] [--folder 100]
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from proxy.testing.histories import pytest_log

GOAL_SECONDS = 10.0


def rollout(path: Path, turns: int) -> None:
    """A rollout as Codex 0.171 writes it: session_meta, then per turn a user message (every
    tenth turn) or a function call and its output, with the event lines between."""

    def line(kind: str, payload: dict) -> str:
        return json.dumps({"timestamp": "2026-12-06T00:00:00Z", "type": kind, "payload": payload})

    meta = {"id": path.stem, "base_instructions": {"text": "You are a coding agent."}}
    out = [line("session_meta", meta)]
    task = {
        "type": "message",
        "role": "user",
        "content": [{"type": "input_text", "text": "Fix it"}],
    }
    out.append(line("response_item", task))
    for t in range(turns):
        call = {
            "type": "function_call",
            "name": "shell",
            "call_id": f"c{t}",
            "arguments": json.dumps({"cmd": f"pytest tests/test_module_{t}.py"}),
        }
        result = {"type": "function_call_output", "call_id": f"c{t}", "output": pytest_log(t)}
        out += [line("response_item", call), line("event_msg", {"type": "token_count"})]
        out.append(line("response_item", result))
    path.write_text("\n".join(out) + "\n")


def stored(url: str, turns: int) -> None:
    """A stored session `long` of N requests, each the history before plus a tool call and
    its pytest output, as an agent sends them (uncompacted: only the replay compiles)."""
    from proxy.store import Store
    from proxy.testing.histories import agent_turn
    from proxy.testing.records import finish_turn, new_request

    store = Store(url)
    store.upgrade()
    messages = [{"role": "user", "content": "Fix the failing tests."}]
    for t in range(turns):
        messages = messages + agent_turn(t)
        ref = store.record_request(new_request("long", messages, window=32768))
        finish_turn(store, ref, None)
    store.close()


def timed(args: list[str]) -> tuple[float, float]:
    """(wall seconds, CPU seconds) of one replay process."""
    cpu = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "proxy.cli.commands", *args], capture_output=True, text=True
    )
    seconds = time.monotonic() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"replay failed: {done.stderr[-2000:]}")
    return seconds, after.ru_utime + after.ru_stime - cpu.ru_utime - cpu.ru_stime


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--turns", type=int, default=500)
    p.add_argument("--window", type=int, default=32768)
    p.add_argument("--folder", type=int, default=100, help="sessions in the folder run")
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        config = root / "config.yaml"
        config.write_text(f"database_url: sqlite:///{root / 'db.sqlite'}\n")
        one = root / f"rollout-{args.turns}.jsonl"
        rollout(one, args.turns)
        folder = root / "sessions"
        folder.mkdir()
        for i in range(args.folder):
            rollout(folder / f"rollout-{i}.jsonl", 20)
        stored(f"sqlite:///{root / 'db.sqlite'}", args.turns)
        base = ["--config", str(config), "replay", "--window", str(args.window)]
        runs = {
            f"{args.turns} turns": [*base, str(one)],
            f"{args.turns} turns, a stored session": [*base, "long"],
            f"{args.turns} turns --set target=0.3": [*base, str(one), "--set", "target=0.3"],
            f"{args.folder} sessions of 20 turns": [*base, str(folder)],
        }
        print(f"{'run':40} {'wall s':>7} {'CPU s':>6} {'goal s':>7} {'ratio':>6}  (medians)")
        for name, cmd in runs.items():
            found = [timed(cmd) for _ in range(args.rounds)]
            wall = statistics.median(w for w, _ in found)
            cpu = statistics.median(c for _, c in found)
            print(
                f"{name:40} {wall:7.2f} {cpu:6.2f} {GOAL_SECONDS:7.1f} {wall / GOAL_SECONDS:6.2f}"
            )


if __name__ == "__main__":
    main()
