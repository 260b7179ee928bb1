"""The benchmark's agent: keeps the whole history, runs real tools on the task's repo.

Each step it sends its history (or the view an arm's `trim` makes of it) with the tools to an
OpenAI-compatible base URL, runs the calls of the answer on the repo and appends their results;
after `correction_at` steps it adds the user's correction. It stops at an answer without tool
calls, an error, or `max_steps`.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from proxy.testing.taskmodel import TOOLS
from proxy.testing.taskrepo import Task, run_pytest

SYSTEM = (
    "You are a coding agent. Use the tools to inspect and change the repository, "
    "run the tests, and finish with a short answer."
)
Messages = list[dict[str, Any]]


@dataclass
class Outcome:
    steps: int = 0
    status: str = ""  # done, no task, step cap, error ...
    reads: list[str] = field(default_factory=list)  # paths, in order
    calls: list[str] = field(default_factory=list)  # tool names, in order
    history_tokens: int = 0  # the last request's full history, as the model counts it

    @property
    def rereads(self) -> int:
        return len(self.reads) - len(set(self.reads))

    @property
    def relists(self) -> int:
        return max(self.calls.count("list_files") - 1, 0)

    @property
    def reruns(self) -> int:
        """Test runs with no edit since the previous run: the model lost sight of the report."""
        runs, changed = 0, True
        for name in self.calls:
            if name == "run_tests":
                runs += not changed
                changed = False
            elif name in ("edit_file", "write_file"):
                changed = True
        return runs


class Tools:
    """The tools of `TOOLS`, run on a repo directory."""

    def __init__(self, root: Path):
        self.root = root.resolve()

    def run(self, name: str, args: dict[str, Any]) -> str:
        try:
            return getattr(self, name)(**args)
        except (AttributeError, TypeError) as exc:
            return f"error: bad call {name}({args}): {exc}"
        except OSError as exc:
            return f"error: {exc}"

    def _path(self, path: str) -> Path:
        p = (self.root / path).resolve()
        if not p.is_relative_to(self.root):
            raise OSError(f"{path} is outside the repository")
        return p

    def list_files(self) -> str:
        files = sorted(str(p.relative_to(self.root)) for p in self.root.rglob("*") if p.is_file())
        return "\n".join(f for f in files if "__pycache__" not in f)

    def read_file(self, path: str) -> str:
        return self._path(path).read_text()

    def edit_file(self, path: str, old_string: str, new_string: str) -> str:
        p = self._path(path)
        text = p.read_text()
        if text.count(old_string) != 1:
            return f"error: old_string occurs {text.count(old_string)} times in {path}, not once"
        p.write_text(text.replace(old_string, new_string))
        return f"edited {path}"

    def write_file(self, path: str, content: str) -> str:
        p = self._path(path)
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(content)
        return f"wrote {path}"

    def run_tests(self) -> str:
        return run_pytest(self.root)[1]


def run_agent(
    base_url: str,
    task: Task,
    root: Path,
    *,
    trim: Callable[[Messages], Messages] | None = None,
    session: str = "task",
    correction_at: int = 6,
    max_steps: int = 150,
) -> Outcome:
    tools, out = Tools(root), Outcome()
    history: Messages = [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": task.prompt},
    ]
    headers = {"X-Session-Id": session, "Authorization": "Bearer bench"}
    with httpx.Client(base_url=base_url, timeout=300, headers=headers) as client:
        while out.steps < max_steps:
            if out.steps == correction_at:
                history.append({"role": "user", "content": task.correction})
            out.steps += 1
            try:
                view = trim(history) if trim else history
            except RuntimeError as exc:  # the trim's own failure ends the run, as it would
                out.status = f"trim failed: {exc}"[:120]
                return out
            body = {"model": "task", "messages": view, "tools": TOOLS}
            r = client.post("/v1/chat/completions", json=body)
            if r.status_code != 200:
                out.status = f"error {r.status_code}"
                return out
            message = r.json()["choices"][0]["message"]
            calls = message.get("tool_calls") or []
            history.append(
                {k: v for k, v in message.items() if k in ("role", "content", "tool_calls")}
            )
            if not calls:
                text = message.get("content") or ""
                out.status = "done" if text.startswith("DONE") else f"answered: {text[:40]}"
                return out
            for call in calls:
                name = call["function"]["name"]
                args = json.loads(call["function"]["arguments"] or "{}")
                out.calls.append(name)
                if name == "read_file":
                    out.reads.append(str(args.get("path")))
                result = tools.run(name, args)
                history.append({"role": "tool", "tool_call_id": call["id"], "content": result})
    out.status = "step cap"
    return out
