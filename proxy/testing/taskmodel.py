"""A scripted model for the task benchmark that acts only on what its request shows.

It plays an agent fixing `taskrepo`'s package through the tools `TOOLS` names. Each step is
decided by exact text search in the request: the task and its constraints (in system and user
text; `strict=False` also reads assistant text), the latest test report's `FAILED` or
`file:line: in test_x` lines, the exact old text of an edit anywhere in the view, the tax rate
the user stated last. What it does not see it fetches again: a file's text by `ctxproxy_recall`
when offered (a `def name` query) and then by a re-read; a report it cannot read by re-running
the tests. A constraint out of sight lets it take the bug's shortcut, which breaks that
constraint. It counts prompts as a model server would and refuses those over its window.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from proxy.testing.scripted import chunk, completion, sse
from proxy.testing.taskrepo import (
    KEEP_SIGS,
    NO_LEGACY,
    NO_TESTS,
    RATE,
    SETTINGS,
    TASK_MARK,
    Bug,
    Task,
)

RECALL = "ctxproxy_recall"
INFLATE = 1.1  # server tokens per cl100k token: a tokenizer that is not the proxy's
GUARD = {"tests": NO_TESTS, "legacy": NO_LEGACY, "signature": KEEP_SIGS}
NO_TASK = "I cannot see what you want me to do. What is the task?"
DONE = "DONE: every test passes and TAX_RATE is set."
_FAILED = re.compile(r"FAILED (tests/\w+\.py::test_\w+)|(tests/\w+\.py):\d+: in (test_\w+)")
_CURRENT = re.compile(r"^TAX_RATE = (\S+)$", re.M)


def _fn(name: str, description: str, **props: str) -> dict[str, Any]:
    params = {
        "type": "object",
        "properties": {k: {"type": "string", "description": v} for k, v in props.items()},
        "required": list(props),
    }
    return {
        "type": "function",
        "function": {"name": name, "description": description, "parameters": params},
    }


TOOLS = [
    _fn("list_files", "List the repository's files."),
    _fn("read_file", "Read a file of the repository.", path="path relative to the repo"),
    _fn(
        "edit_file",
        "Replace old_string, which must occur exactly once, by new_string.",
        path="path relative to the repo",
        old_string="exact text to replace",
        new_string="replacement",
    ),
    _fn("write_file", "Write a whole file.", path="path relative to the repo", content="text"),
    _fn("run_tests", "Run the test suite (pytest) and show its report."),
]


@dataclass
class Pair:
    """A tool call in the view and its result (None when the result is not in the view)."""

    name: str
    args: dict[str, Any]
    result: str | None


@dataclass
class View:
    """What one request shows, read the way the model reads it."""

    messages: list[dict[str, Any]]
    strict: bool
    tools: set[str]
    pairs: list[Pair] = field(default_factory=list)

    def __post_init__(self) -> None:
        results = {
            m.get("tool_call_id"): text_of(m) for m in self.messages if m.get("role") == "tool"
        }
        for m in self.messages:
            for call in m.get("tool_calls") or []:
                fn = call.get("function") or {}
                try:
                    args = json.loads(fn.get("arguments") or "{}")
                except json.JSONDecodeError:
                    args = {}
                self.pairs.append(Pair(fn.get("name", ""), args, results.get(call.get("id"))))
        roles = ("system", "user") if self.strict else ("system", "user", "assistant")
        self.instructions = "\n".join(text_of(m) for m in self.messages if m.get("role") in roles)
        self.everything = "\n".join(text_of(m) for m in self.messages)

    def last(self, *names: str) -> int:
        return max((i for i, p in enumerate(self.pairs) if p.name in names), default=-1)

    def current_rate(self) -> str | None:
        rate = None
        for p in self.pairs:
            if p.args.get("path") != SETTINGS or p.result is None or p.result.startswith("error"):
                continue
            text = p.args.get("new_string", "") if p.name == "edit_file" else p.result
            text = p.args.get("content", text) if p.name == "write_file" else text
            rate = next(iter(_CURRENT.findall(text)[-1:]), rate)
        return rate


def text_of(message: dict[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, list):
        return "\n".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return content or ""


def failing_tests(report: str) -> list[str]:
    """The failing tests a report names, in its order, each once."""
    names = [a or f"{b}::{c}" for a, b, c in _FAILED.findall(report)]
    return list(dict.fromkeys(names))


@dataclass
class Action:
    """One answer: a tool call's name and target, or a final text ("answer")."""

    name: str
    path: str = ""
    recall_round: bool = False  # the request was ctxproxy's round bringing a recall result


@dataclass
class TaskModel:
    task: Task
    strict: bool = False  # follow only system and user text
    window: int | None = None  # refuse prompts over this many tokens, as llama.cpp does
    prompts: list[str] = field(default_factory=list)
    tokens: list[int] = field(default_factory=list)
    actions: list[Action] = field(default_factory=list)
    over: int = 0

    def __post_init__(self) -> None:
        from proxy.compile.tokens import TokenCounter

        self.oracle: dict[str, Bug] = {b.test: b for b in self.task.bugs}
        self._counter = TokenCounter()

    @property
    def app(self) -> Starlette:
        return Starlette(routes=[Route("/v1/chat/completions", self.chat, methods=["POST"])])

    async def chat(self, request: Request) -> Response:
        body = await request.json()
        text = render(body["messages"], body.get("tools"))
        tokens = round(self._counter.text(text) * INFLATE)
        if self.window is not None and tokens > self.window:
            self.over += 1
            error = {
                "code": 400,
                "type": "exceed_context_size_error",
                "n_prompt_tokens": tokens,
                "n_ctx": self.window,
                "message": "the request exceeds the available context size",
            }
            return JSONResponse({"error": error}, status_code=400)
        self.prompts.append(text)
        self.tokens.append(tokens)
        message = self.answer(body)
        calls = message.get("tool_calls")
        finish = "tool_calls" if calls else "stop"
        model = body.get("model", "task")
        out = completion(model, None, body, message=message, finish=finish)
        out["usage"] = {
            "prompt_tokens": tokens,
            "completion_tokens": 30,
            "total_tokens": tokens + 30,
        }
        if not body.get("stream"):
            return JSONResponse(out)
        delta = {k: v for k, v in message.items() if v is not None}
        if calls:
            delta["tool_calls"] = [{**c, "index": i} for i, c in enumerate(calls)]
        events = [sse(chunk(model, delta)), sse(chunk(model, {}, finish=finish))]
        if (body.get("stream_options") or {}).get("include_usage"):
            events.append(sse({**chunk(model, {}), "choices": [], "usage": out["usage"]}))
        events.append(b"data: [DONE]\n\n")
        return StreamingResponse(iter(events), media_type="text/event-stream")

    def answer(self, body: dict[str, Any]) -> dict[str, Any]:
        messages = body.get("messages") or []
        tools = {(t.get("function") or {}).get("name", "") for t in body.get("tools") or []}
        view = View(messages, self.strict, tools)
        recall_round = bool(view.pairs) and view.pairs[-1].name == RECALL
        name, args = self.decide(view)
        self.actions.append(Action(name, args.get("path", ""), recall_round))
        if name == "answer":
            return {"role": "assistant", "content": args["text"]}
        n = len(self.actions)
        call = {
            "id": f"call_{n}",
            "type": "function",
            "function": {"name": name, "arguments": json.dumps(args)},
        }
        return {"role": "assistant", "content": None, "tool_calls": [call]}

    def decide(self, view: View) -> tuple[str, dict[str, Any]]:
        if TASK_MARK not in view.instructions:
            return "answer", {"text": NO_TASK}
        if view.last("list_files", "run_tests") < 0:
            return "list_files", {}
        tests = view.last("run_tests")
        report = view.pairs[tests].result if tests >= 0 else None
        if report is None or view.last("edit_file", "write_file") > tests:
            return "run_tests", {}
        failing = [t for t in failing_tests(report) if t in self.oracle]
        if failing:
            return self.fix(self.oracle[failing[0]], view)
        if " failed" in report or " passed" not in report:
            return "run_tests", {}  # cannot tell which test fails: run them again
        return self.finish(view)

    def fix(self, bug: Bug, view: View) -> tuple[str, dict[str, Any]]:
        """Edit once it has looked at what the test expects (in view, or a read of the test
        file since the latest test run) and the view shows the exact old text; else fetch."""
        shortcut = bool(bug.trap) and GUARD[bug.trap] not in view.instructions
        path, old, new = (bug.path, bug.old, bug.new)
        if shortcut:
            path, old, new = (bug.short_path, bug.short_old, bug.short_new)
        test_path = bug.test.split("::")[0]
        tests = view.last("run_tests")
        looked = any(
            p.name == "read_file" and p.args.get("path") == test_path
            for p in view.pairs[tests + 1 :]
        )
        needs = [] if looked else [(test_path, bug.expect, f"def test_{bug.func}")]
        needs.append((path, old, f"def {bug.func}" if path == bug.path else f"test_{bug.func}"))
        last = view.pairs[-1]
        failed_edit = last.name == "edit_file" and (last.result or "").startswith("error")
        for where, text, query in needs:
            if text in view.everything and not (failed_edit and where == path):
                continue
            if where not in view.everything and not any(where in str(p.args) for p in view.pairs):
                return "list_files", {}  # the file's name is nowhere in sight
            read_before = any(
                p.name == "read_file" and p.args.get("path") == where for p in view.pairs
            )
            asked = last.name == RECALL and last.args.get("query") == query
            if RECALL in view.tools and read_before and not asked:
                return RECALL, {"query": query}
            return "read_file", {"path": where}
        return "edit_file", {"path": path, "old_string": old, "new_string": new}

    def finish(self, view: View) -> tuple[str, dict[str, Any]]:
        stated = RATE.findall(view.instructions)
        current = view.current_rate()
        if stated and current is None:
            return "read_file", {"path": SETTINGS}
        if stated and current != stated[-1]:
            edit = {"old_string": f"TAX_RATE = {current}", "new_string": f"TAX_RATE = {stated[-1]}"}
            return "edit_file", {"path": SETTINGS, **edit}
        return "answer", {"text": DONE}


def render(messages: list[dict[str, Any]], tools: list[Any] | None = None) -> str:
    """The prompt as a ChatML-style template lays it out, tool definitions first."""
    parts = [f"<|im_start|>tools\n{json.dumps(tools)}<|im_end|>\n"] if tools else []
    for m in messages:
        content = m.get("content")
        text = content if isinstance(content, str) else json.dumps(content or "")
        calls = json.dumps(m["tool_calls"]) if m.get("tool_calls") else ""
        parts.append(f"<|im_start|>{m.get('role')}\n{text}{calls}<|im_end|>\n")
    return "".join(parts) + "<|im_start|>assistant\n"
