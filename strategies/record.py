"""The agent's work record in forgotten steps, derived from its tool calls, and its current plan.

Files read; files edited, written or deleted, with the step; commands run with their outcome
(passed/failed counts, exit status), read as numbers from the structure of their output. No
text of any tool output is carried. The plan is the agent's newest plan (a TodoWrite or
update_plan call, or a checklist in its text), carried only when that newest one is forgotten.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

from strategies.calls import shell_words
from strategies.evidence import bears_failure
from strategies.memo import text_cache
from strategies.messages import Message, iterations, text_of, tool_calls

PATH_ARGS = ("path", "file_path", "filename", "file", "notebook_path", "target_file")
CMD_ARGS = ("command", "cmd", "script")
ARG_CHARS = 60
RUNS_SHOWN = 4  # the latest distinct commands named in full; older ones counted by program
READ_CMDS = frozenset({"cat", "head", "tail", "less", "more", "nl", "sed", "bat", "type"})
PATCH_FILE = re.compile(r"^\*\*\* (Update|Add|Delete) File: (\S+)", re.MULTILINE)
COUNTS = re.compile(r"\b(\d+) (passed|failed|errors?|error|skipped|xfailed|xpassed)\b")
EXIT = re.compile(
    r"\b(?:exit(?:ed)?(?: with)?(?: code| status)?|return ?code|returncode)\s*[:=]?\s*(-?\d+)\b",
    re.IGNORECASE,
)
PLAN_TOOLS = re.compile(r"todo|plan", re.IGNORECASE)
CHECKBOX = re.compile(r"^\s*(?:[-*]|\d+[.)])\s+\[([ xX~-])\]\s+(.+)$", re.MULTILINE)


def _clip(text: str, limit: int = ARG_CHARS) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _name(call: dict[str, Any]) -> str:
    fn = call.get("function")
    return str(fn.get("name", "?")) if isinstance(fn, dict) else "?"


def _args(call: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    fn = call.get("function") if isinstance(call.get("function"), dict) else {}
    raw = fn.get("arguments") if isinstance(fn, dict) else None
    try:
        args = json.loads(raw) if isinstance(raw, str) else raw
    except ValueError:
        args = None
    return _name(call), args if isinstance(args, dict) else {}


def _call_action(call: dict[str, Any]) -> tuple[str, str]:
    """action() of a call; by its JSON arguments from memory (a work record reads every
    forgotten call at each firing)."""
    fn = call.get("function")
    raw = fn.get("arguments") if isinstance(fn, dict) else None
    if isinstance(raw, str):
        return _action_by_json(raw, _name(call))
    return action(*_args(call))


@text_cache()
def _action_by_json(arguments: str, name: str) -> tuple[str, str]:
    return action(*_args({"function": {"name": name, "arguments": arguments}}))


def action(name: str, args: dict[str, Any]) -> tuple[str, str]:
    """(verb, object) of one call: read / edited / wrote / deleted a path, ran a command, or
    used a tool with its key argument."""
    low = name.lower()
    path = next((args[k] for k in PATH_ARGS if isinstance(args.get(k), str)), None)
    cmd = next((args[k] for k in CMD_ARGS if isinstance(args.get(k), str | list)), None)
    if isinstance(cmd, list):
        cmd = " ".join(str(c) for c in cmd)
    if path and cmd in ("view", "create", "str_replace", "insert", "undo_edit"):
        return {"view": "read", "create": "wrote"}.get(cmd, "edited"), path
    if path:
        for verb, words in (
            ("deleted", ("delete", "remove")),
            ("edited", ("edit", "replace", "patch", "insert")),
            ("wrote", ("write", "create", "save")),
            ("read", ("read", "view", "open", "cat")),
        ):
            if any(w in low for w in words):
                return verb, path
    patch = args.get("input") or args.get("patch") or (cmd if cmd and "*** " in cmd else None)
    if isinstance(patch, str) and PATCH_FILE.search(patch):
        verbs = {"Update": "edited", "Add": "wrote", "Delete": "deleted"}
        found = PATCH_FILE.findall(patch)
        return verbs[found[0][0]], ", ".join(p for _, p in found)
    if isinstance(cmd, str) and cmd.strip():
        return _shell(cmd)
    key = next((v for v in args.values() if isinstance(v, str) and v.strip()), "")
    return f"used {name}", key


def _shell(cmd: str) -> tuple[str, str]:
    """A simple file read or removal as such; anything else is a command that ran."""
    words = shell_words(cmd) or ()
    simple = words and not any(c in cmd for c in "|;&><`$")
    if simple and words[0] in READ_CMDS and len(words) > 1 and not words[-1].startswith("-"):
        return "read", words[-1]
    if simple and words[0] == "rm" and len(words) > 1:
        return "deleted", ", ".join(w for w in words[1:] if not w.startswith("-"))
    return "ran", cmd


@text_cache()
def outcome(output: str) -> str:
    """Passed/failed counts and exit status, read as numbers; else whether a failure shows.
    Cached: a forget marker's work record reads every forgotten output at each firing."""
    tail = output[-4000:]
    parts = []
    lines = [ln for ln in tail.split("\n") if COUNTS.search(ln)]
    if lines:
        counts = COUNTS.findall(lines[-1])
        parts.append(", ".join(f"{n} {word}" for n, word in counts))
    status = EXIT.findall(tail)
    if status:
        parts.append(f"exit {status[-1]}")
    if not parts and bears_failure(output):
        parts.append("a failure shown")
    return "; ".join(parts)


def work_record(raw: Sequence[Message], forgotten: Sequence[int]) -> str:
    """One compact paragraph: what the agent did in the forgotten steps, latest first."""
    iters = iterations(raw)
    outputs = {str(m.get("tool_call_id")): text_of(m) or "" for m in raw if m.get("role") == "tool"}
    reads: dict[str, int] = {}
    changes: dict[tuple[str, str], int] = {}
    runs: dict[str, tuple[int, int, str]] = {}  # command -> (times, latest step, outcome)
    used: dict[str, list[str]] = {}
    for i in sorted(forgotten):
        for call in tool_calls(raw[i]):
            verb, obj = _call_action(call)
            step = iters[i]
            if verb == "read":
                reads[_clip(obj)] = step
            elif verb in ("edited", "wrote", "deleted"):
                changes[(verb, _clip(obj))] = step
            elif verb == "ran":
                got = outcome(outputs.get(str(call.get("id")), ""))
                times = runs.get(_clip(obj), (0, 0, ""))[0]
                runs[_clip(obj)] = (times + 1, step, got)
            else:
                used.setdefault(verb.removeprefix("used "), []).append(_clip(obj, 40))
    parts = []
    if changes:
        latest = sorted(changes.items(), key=lambda kv: -kv[1])
        parts.append("; ".join(f"{v} {p} (step {s})" for (v, p), s in latest))
    if runs:
        latest_runs = sorted(runs.items(), key=lambda kv: -kv[1][1])
        shown = [_run(c, *r) for c, r in latest_runs[:RUNS_SHOWN]]
        older: dict[str, int] = {}
        for c, (times, _, _) in latest_runs[RUNS_SHOWN:]:
            program = c.split()[0] if c.split() else c
            older[program] = older.get(program, 0) + times
        if older:
            shown.append("before those " + ", ".join(f"{p} ×{n}" for p, n in older.items()))
        parts.append("ran " + "; ".join(shown))
    if reads:
        parts.append("read " + ", ".join(sorted(reads, key=lambda p: -reads[p])))
    for name, objs in used.items():
        listed = "; ".join(reversed([o for o in objs if o][-4:]))
        parts.append(f"{name} ×{len(objs)}" + (f" ({listed})" if listed else ""))
    return ". ".join(parts)


def _run(cmd: str, times: int, step: int, got: str) -> str:
    many = f" ×{times}" if times > 1 else ""
    return f"`{cmd}`{many} (step {step}{': ' + got if got else ''})"


def current_plan(raw: Sequence[Message], forgotten: Sequence[int]) -> str:
    """The agent's newest plan, when the message holding it is forgotten; "" otherwise."""
    for i in range(len(raw) - 1, -1, -1):
        msg = raw[i]
        if msg.get("role") != "assistant":
            continue
        plan = _plan_of(msg)
        if plan:
            return plan if i in set(forgotten) else ""
    return ""


def _plan_of(msg: Message) -> str:
    for call in reversed(tool_calls(msg)):
        if not PLAN_TOOLS.search(_name(call)):
            continue
        _, args = _args(call)
        items = args.get("todos") or args.get("plan")
        if isinstance(items, list):
            return "; ".join(_item(x) for x in items if _item(x))
    text = text_of(msg) or ""
    boxes = CHECKBOX.findall(text)
    if len(boxes) >= 2:
        return "; ".join(f"[{'x' if m in 'xX' else ' '}] {_clip(t, 120)}" for m, t in boxes)
    return ""


def _item(item: Any) -> str:
    if isinstance(item, str):
        return _clip(item, 120)
    if not isinstance(item, dict):
        return ""
    text = item.get("content") or item.get("step") or item.get("title") or ""
    status = item.get("status")
    return f"[{status}] {_clip(str(text), 120)}" if status else _clip(str(text), 120)
