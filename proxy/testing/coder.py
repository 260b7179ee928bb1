"""A scripted chat-completions upstream that plays a coding agent with the tools a CLI offers.

It fixes the bug of `tests/agents`' scratch repo in the steps a coding agent takes: list the
files, read each source file, run pytest (sees the failure), edit the source, run pytest again
(sees it pass), answer "done". Each step is decided from the conversation it receives: the
latest task prompt, the last tool call after it and that call's result, so it works on a
compacted view too. Tools are found by name and their parameters by schema, so the same script
drives Claude Code, Codex, opencode and Qwen Code; a request without tools (aider) gets a
SEARCH/REPLACE block in the text. When ctxproxy offers `ctxproxy_recall`, it calls it once
before each pytest run, so a test can show that recall is answered inside the proxy.
"""

from __future__ import annotations

import asyncio
import json
import shlex
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from proxy.testing.scripted import chunk, completion, sse, usage

TASK = "Fix the failing test in this repository. Read the sources, run pytest, fix the bug."
AGAIN = "Run the tests once more and tell me whether they pass."
BUG, FIX = "return a - b", "return a + b"
RECALL = "ctxproxy_recall"
MAX_ANSWERS = 80
SHELLS = ("bash", "run_shell_command", "shell", "shell_command", "exec_command", "local_shell")
READS = ("read", "read_file")
EDITS = ("edit", "replace", "str_replace", "str_replace_editor")
PATHS = ("file_path", "filePath", "absolute_path", "path")
OLDS = ("old_string", "oldString", "old_str")
NEWS = ("new_string", "newString", "new_str")


@dataclass
class Call:
    """A tool call the script makes: what kind of step it is, and its name and arguments."""

    step: str  # list, read, pytest, edit, recall
    name: str
    args: dict[str, Any]
    target: str = ""  # the file of a read or an edit


@dataclass
class Coder:
    """The script's state: the scratch repo it works in and what it was sent and answered."""

    repo: Path = Path(".")
    python: str = "python3"  # the interpreter with pytest (a login shell may reset PATH)
    sources: list[str] = field(default_factory=list)  # files to read, relative to repo
    received: list[dict[str, Any]] = field(default_factory=list)
    answered: list[dict[str, Any]] = field(default_factory=list)  # each answer's message

    def reset(self, repo: Path, sources: list[str]) -> None:
        self.repo, self.sources = repo, sources
        self.received.clear()
        self.answered.clear()

    @property
    def app(self) -> Starlette:
        return Starlette(routes=[Route("/v1/chat/completions", self.chat, methods=["POST"])])

    async def chat(self, request: Request) -> Response:
        body = await request.json()
        self.received.append(body)
        message = self.answer(body)
        self.answered.append(message)
        model, calls = body.get("model", "coder"), message.get("tool_calls")
        finish = "tool_calls" if calls else "stop"
        if not body.get("stream"):
            return JSONResponse(completion(model, None, body, message=message, finish=finish))
        return StreamingResponse(self._deltas(model, message, body), media_type="text/event-stream")

    def answer(self, body: dict[str, Any]) -> dict[str, Any]:
        """The next assistant message for this conversation."""
        messages, tools = body.get("messages") or [], tool_specs(body)
        if not tools:
            return {"role": "assistant", "content": self._text_answer(messages)}
        if len(self.answered) >= MAX_ANSWERS:  # a CLI that keeps refusing the steps: stop
            return {"role": "assistant", "content": "giving up: too many steps."}
        call = self._next_call(messages, tools)
        if call is None:
            return {"role": "assistant", "content": "done: the tests pass."}
        n = len(self.answered)
        spec = {"name": call.name, "arguments": json.dumps(call.args)}
        tool_call = {"id": f"call_{call.step}_{n}", "type": "function", "function": spec}
        return {"role": "assistant", "content": None, "tool_calls": [tool_call]}

    def _next_call(self, messages: list[dict[str, Any]], tools: dict[str, Any]) -> Call | None:
        start = _last_prompt(messages)
        again = start >= 0 and AGAIN in text_of(messages[start])
        last, result = _last_call(messages[start + 1 :])
        if last is not None and last["function"]["name"] == RECALL:
            # The proxy's own round: carry on as if the recall had not happened.
            last, result = _last_call(messages[start + 1 :], skip=RECALL)
            return self._after(last, result, tools, again, recalled=True)
        return self._after(last, result, tools, again, recalled=False)

    def _after(
        self,
        last: dict[str, Any] | None,
        result: str,
        tools: dict[str, Any],
        again: bool,
        recalled: bool,
    ) -> Call | None:
        kind = self._kind(last)
        if kind == "pytest":
            if " passed" in result and " failed" not in result:
                return None
            if " failed" in result:
                return self._edit(tools)
            raise AssertionError(f"pytest said neither passed nor failed: {result[:500]}")
        if kind == "none":
            step = self._pytest(tools) if again else self._list(tools)
        elif kind == "list":
            step = self._read(tools, self.sources[0])
        elif kind == "read":
            target = self._read_target(last)
            rest = self.sources[self.sources.index(target) + 1 :] if target in self.sources else []
            step = self._read(tools, rest[0]) if rest else self._pytest(tools)
        else:  # edit
            step = self._pytest(tools)
        if step.step == "pytest" and RECALL in tools and not recalled:
            return Call("recall", RECALL, {"query": "def add"})
        return step

    def _kind(self, call: dict[str, Any] | None) -> str:
        if call is None:
            return "none"
        name, args = call["function"]["name"], call["function"].get("arguments") or ""
        if name.lower() in EDITS or "sed -i" in args:
            return "edit"
        if "-m pytest" in args:  # not "pytest" alone: pytest's tmp_path holds the word
            return "pytest"
        if name.lower() in READS or "cat " in args:
            return "read"
        return "list"

    def _read_target(self, call: dict[str, Any] | None) -> str:
        args = (call or {}).get("function", {}).get("arguments") or ""
        found = [s for s in self.sources if s in args]
        return max(found, key=len) if found else ""

    # The steps, written for the tools on offer.
    def _shell(self, tools: dict[str, Any], step: str, command: str, target: str = "") -> Call:
        name = _pick(tools, SHELLS)
        if name is None:
            raise AssertionError(f"no shell tool among {sorted(tools)}")
        props = tools[name].get("properties") or {}
        key = "cmd" if "cmd" in props and "command" not in props else "command"
        line = f"cd {shlex.quote(str(self.repo))} && {command}"
        value: Any = ["bash", "-lc", line] if props.get(key, {}).get("type") == "array" else line
        args: dict[str, Any] = {key: value}
        if "description" in props:
            args["description"] = f"{step} in the scratch repo"
        if "yield_time_ms" in props:  # Codex: wait for the command instead of polling it
            args["yield_time_ms"] = 60000
        if "workdir" in props:
            args["workdir"] = str(self.repo)
        return Call(step, name, args, target)

    def _list(self, tools: dict[str, Any]) -> Call:
        return self._shell(tools, "list", "ls -R")

    def _pytest(self, tools: dict[str, Any]) -> Call:
        # No plugin autoload: the scratch repo needs none, and it starts in 1 s instead of 10.
        python = shlex.quote(self.python)
        command = f"PYTEST_DISABLE_PLUGIN_AUTOLOAD=1 {python} -m pytest -q 2>&1 | tail -n 30"
        return self._shell(tools, "pytest", command)

    def _read(self, tools: dict[str, Any], source: str) -> Call:
        name = _pick(tools, READS)
        path = str(self.repo / source)
        if name is None:
            return self._shell(tools, "read", f"cat {shlex.quote(source)}", source)
        key = _param(tools[name], PATHS)
        return Call("read", name, {key: path}, source)

    def _edit(self, tools: dict[str, Any]) -> Call:
        source = self.sources[0]
        name = _pick(tools, EDITS)
        if name is not None:
            spec = tools[name]
            old, new = _param(spec, OLDS, ""), _param(spec, NEWS, "")
            if old and new:
                args = {_param(spec, PATHS): str(self.repo / source), old: BUG, new: FIX}
                return Call("edit", name, args, source)
        command = f"sed -i 's/{BUG}/{FIX}/' {shlex.quote(source)}"
        return self._shell(tools, "edit", command, source)

    def _text_answer(self, messages: list[dict[str, Any]]) -> str:
        """Without tools (aider): a SEARCH/REPLACE block while the bug is in view, else done."""
        system = " ".join(text_of(m) for m in messages if m.get("role") == "system")
        if "SEARCH" not in system:
            return "Summary: the user asked to fix a failing test; the bug was fixed."
        latest = next((text_of(m) for m in reversed(messages) if m.get("role") == "user"), "")
        fixed = any(FIX in text_of(m) for m in messages if m.get("role") == "assistant")
        if AGAIN in latest or fixed:
            return "done: the tests pass."
        source = self.sources[0]
        return (
            "The test expects add(2, 3) == 5, but `add` returns `a - b`: it subtracts instead"
            " of adding. Replacing the operator fixes it; `mul` is right as it is.\n\n"
            f"{source}\n```python\n"
            f"<<<<<<< SEARCH\n    {BUG}\n=======\n    {FIX}\n>>>>>>> REPLACE\n```\n"
        )

    async def _deltas(
        self, model: str, message: dict[str, Any], body: dict[str, Any]
    ) -> AsyncIterator[bytes]:
        text, calls = message.get("content"), message.get("tool_calls") or []
        yield sse(chunk(model, {"role": "assistant", "content": ""}))
        for part in _pieces(text or ""):
            yield sse(chunk(model, {"content": part}))
            await asyncio.sleep(0)
        for i, call in enumerate(calls):
            head = {**call, "index": i, "function": {**call["function"], "arguments": ""}}
            yield sse(chunk(model, {"tool_calls": [head]}))
            for part in _pieces(call["function"]["arguments"]):
                delta = {"tool_calls": [{"index": i, "function": {"arguments": part}}]}
                yield sse(chunk(model, delta))
        yield sse(chunk(model, {}, finish="tool_calls" if calls else "stop"))
        if (body.get("stream_options") or {}).get("include_usage"):
            yield sse({**chunk(model, {}), "choices": [], "usage": usage(body, text)})
        yield b"data: [DONE]\n\n"


def tool_specs(body: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The offered function tools: name -> parameters schema."""
    out: dict[str, dict[str, Any]] = {}
    for tool in body.get("tools") or []:
        fn = tool.get("function") or {}
        if fn.get("name"):
            out[fn["name"]] = fn.get("parameters") or {}
    return out


def text_of(message: dict[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, list):
        return "\n".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return content or ""


def _pick(tools: dict[str, Any], names: tuple[str, ...]) -> str | None:
    by_lower = {name.lower(): name for name in tools}
    return next((by_lower[n] for n in names if n in by_lower), None)


def _param(spec: dict[str, Any], names: tuple[str, ...], default: str = "path") -> str:
    props = spec.get("properties") or {}
    return next((n for n in names if n in props), default)


def _last_prompt(messages: list[dict[str, Any]]) -> int:
    """The index of the latest user message holding a task prompt, or -1."""
    for i in range(len(messages) - 1, -1, -1):
        text = text_of(messages[i]) if messages[i].get("role") == "user" else ""
        if TASK in text or AGAIN in text:
            return i
    return -1


def _last_call(messages: list[dict[str, Any]], skip: str = "") -> tuple[dict[str, Any] | None, str]:
    """The last tool call (not named `skip`) and the text of its result."""
    results = {m.get("tool_call_id"): text_of(m) for m in messages if m.get("role") == "tool"}
    for msg in reversed(messages):
        for call in reversed(msg.get("tool_calls") or []):
            if call["function"]["name"] != skip:
                return call, results.get(call.get("id"), "")
    return None, ""


def _pieces(text: str, size: int = 40) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)] or []
