"""The task benchmark: does an agent finish a coding task through each way of fitting the window?

A scripted model that acts only on what its request shows (proxy/testing/taskmodel.py) fixes the
planted bugs of a generated package (proxy/testing/taskrepo.py) under three constraints and a
correction, driven by an agent that runs real tools (bench/task/agent.py), once per arm
(bench/task/arms.py), model variant and seed. A run is solved when the tests pass, the
constraints hold, the correction is applied and the agent said DONE.
Run from the repository root: python -m bench.task [--seeds 3] [--quick] [--arms ...]
"""

from __future__ import annotations

import argparse
import itertools
import shutil
import socket
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from bench import spawn, tabulate
from bench.task import arms as arms_mod
from bench.task.agent import run_agent
from bench.task.metrics import Run, report
from proxy.testing.servers import ServerThread, free_port
from proxy.testing.taskmodel import RECALL, TaskModel
from proxy.testing.taskrepo import check, make_task

VARIANTS = {"any": False, "user-only": True}  # the model reads assistant text too, or not


@dataclass
class Ports:
    """Loopback ports from a range (or any free port when none is given)."""

    lo: int = 0
    hi: int = 0
    used: set[int] = field(default_factory=set)

    def take(self) -> int:
        if not self.lo:
            return free_port()
        for port in range(self.lo, self.hi + 1):
            if port in self.used:
                continue
            with socket.socket() as s:
                try:
                    s.bind(("127.0.0.1", port))
                except OSError:
                    continue
            self.used.add(port)
            return port
        raise RuntimeError(f"no free port in {self.lo}-{self.hi}")


class Dispatch:
    """One model server for every run: requests go to the run's current TaskModel."""

    def __init__(self) -> None:
        self.model: TaskModel | None = None

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while (await receive())["type"] != "lifespan.shutdown":
                await send({"type": "lifespan.startup.complete"})
            await send({"type": "lifespan.shutdown.complete"})
            return
        assert self.model is not None
        await self.model.app(scope, receive, send)


def one_run(
    arm: arms_mod.Arm, base: str, model: TaskModel, trim: Any, wd: Path, session: str
) -> Run:
    task = model.task
    root = wd / session
    task.write(root)
    started = time.perf_counter()
    out = run_agent(base, task, root, trim=trim, session=session)
    judged = check(task, root)
    recalls = [i for i, a in enumerate(model.actions) if a.name == RECALL]
    # A recall helped unless the model's next step re-reads a file (what it was looking for).
    after = [model.actions[i + 1].name for i in recalls if i + 1 < len(model.actions)]
    helped = sum(name != "read_file" for name in after)
    recall_tokens = sum(
        t for t, a in zip(model.tokens, model.actions, strict=False) if a.recall_round
    )
    from bench.sessions import prefix_reuse

    return Run(
        arm=arm.name,
        variant="user-only" if model.strict else "any",
        seed=task.seed,
        status=out.status,
        checks=judged,
        solved=out.status == "done" and all(judged.values()),
        steps=out.steps,
        rereads=out.rereads,
        relists=out.relists,
        reruns=out.reruns,
        recalls=len(recalls),
        recalls_helped=helped,
        prompt_tokens=sum(model.tokens),
        recall_tokens=recall_tokens,
        over=model.over,
        reuse=prefix_reuse(model.prompts),
        seconds=time.perf_counter() - started,
    )


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--bugs", type=int, default=12)
    ap.add_argument("--arms", nargs="+", default=list(arms_mod.ARMS))
    ap.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    ap.add_argument("--quick", action="store_true", help="1 seed, 3 bugs, full and ctxproxy-4k")
    ap.add_argument("--twice", action="store_true", help="each session twice: same steps?")
    ap.add_argument("--ports", default="", help="LO-HI: the servers' loopback ports")
    ap.add_argument("--out", type=Path, default=tabulate.RESULTS)
    args = ap.parse_args(argv)
    if args.quick:
        args.seeds, args.bugs, args.arms, args.variants = 1, 3, ["full", "ctxproxy-4k"], ["any"]
    lo, hi = (int(x) for x in args.ports.split("-")) if args.ports else (0, 0)
    ports, dispatch, runs = Ports(lo, hi), Dispatch(), []
    counter = arms_mod.Counter()
    # A long keep-alive: a pooled connection closed by the server mid-run is not measured here.
    with ServerThread(dispatch, port=ports.take(), timeout_keep_alive=600) as up:
        wd = tabulate.workdir("ctxproxy-task-")
        for arm in map(arms_mod.parse, args.arms):
            runs += run_arm(arm, args, up.url, ports, dispatch, counter, wd)
        shutil.rmtree(wd, ignore_errors=True)
    print(report(runs, args))
    data = {
        "machine": tabulate.machine(),
        "when": tabulate.now(),
        "args": {**vars(args), "out": str(args.out)},
        "runs": [asdict(r) for r in runs],
    }
    path = tabulate.write_json("task-quick" if args.quick else "task", data, args.out)
    print(f"\nwritten: {path}")
    return data


def run_arm(
    arm: arms_mod.Arm,
    args: argparse.Namespace,
    upstream: str,
    ports: Ports,
    dispatch: Dispatch,
    counter: arms_mod.Counter,
    wd: Path,
) -> list[Run]:
    runs: list[Run] = []
    proxy: spawn.Server | None = None
    worker: arms_mod.LiteLLM | None = None
    trim: Callable[[arms_mod.Messages], arms_mod.Messages] | None = None
    try:
        if arm.proxy and arm.window:
            proxy = arms_mod.start_proxy(wd / arm.name, upstream, arm.window, ports.take())
        elif arm.trim == "sliding" and arm.window:
            trim = arms_mod.sliding(arm.window, counter)
        elif arm.trim == "litellm" and arm.window:
            trim = worker = arms_mod.litellm(arm.window, counter)
        base = proxy.url if proxy else upstream
        for variant in args.variants:
            for seed, rep in itertools.product(range(1, args.seeds + 1), range(1 + args.twice)):
                model = TaskModel(make_task(seed, args.bugs), VARIANTS[variant], arm.window)
                dispatch.model = model
                session = f"{arm.name}-{variant}-{seed}" + (f"-again{rep}" if rep else "")
                run = one_run(arm, base, model, trim, wd, session)
                print(f"{session}: {run.line()}", flush=True)
                runs.append(run)
    except Exception as exc:  # an arm that cannot run is a row saying why, not a crash
        if arm.trim == "litellm" and type(exc).__name__ == "Unavailable":
            print(f"{arm.name}: unavailable ({exc})", flush=True)
            return runs
        raise
    finally:
        if proxy:
            proxy.stop()
        if worker:
            worker.close()
    return runs


if __name__ == "__main__":
    main()
