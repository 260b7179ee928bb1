"""Which tool outputs are the newest read of a file the agent edits.

An agent copies an edit's `old_string` from the newest view of the file, so that view must stay
verbatim until the agent reads the file again. Its own edits since do not make it useless: the
read with the edit calls in view is the file as it stands, and an agent fixing one bug after
another in a file edits from it again (folded, it reads the whole file anew: the task benchmark
at 4k re-read 11 files a run). What counts as a read or an edit is decided by the call: a
viewing tool or a one-step `cat`/`sed -n`/`head` of a path, an edit tool, `apply_patch`, or a
shell step that writes a file (`sed -i`, `tee`, `>`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

from strategies.calls import COMMAND_KEYS, calls_by_id, shell_words
from strategies.context import Context
from strategies.memo import text_cache
from strategies.messages import Message

READ_TOOLS = frozenset(
    {"read", "read_file", "readfile", "view", "view_file", "open_file", "cat", "notebookread"}
)
EDIT_TOOLS = frozenset(
    {
        "edit", "multiedit", "write", "write_file", "edit_file", "create_file", "str_replace",
        "replace", "notebookedit", "apply_patch", "patch", "insert", "create",
    }
)  # fmt: skip
# One tool for both, telling them apart by its `command` argument.
EDITOR_TOOLS = frozenset({"str_replace_editor", "str_replace_based_edit_tool", "editor"})
PATH_KEYS = ("path", "file_path", "filename", "file", "target_file", "notebook_path")
READ_PROGRAMS = frozenset({"cat", "nl", "head", "tail", "bat", "sed", "less", "more"})
_PATCH_FILE = re.compile(r"^\*\*\* (?:Update|Add|Delete) File: (.+)$|^\+\+\+ (?:b/)?(\S+)", re.M)
# Of the room, what verbatim reads may hold, the newest first: at a 4k window (a room of
# ~1,900 tokens) one ~800-token source file, which 0.3 left out (the task bench re-read it).
READS_SHARE = 0.4


def _args(function: dict[str, Any]) -> dict[str, Any]:
    raw = function.get("arguments")
    try:
        value = json.loads(raw) if isinstance(raw, str) else raw
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def _path(args: dict[str, Any]) -> str | None:
    value = next((args[k] for k in PATH_KEYS if isinstance(args.get(k), str)), None)
    return _norm(value) if value else None


def _norm(path: str) -> str:
    return path.strip().removeprefix("./")


def file_action(function: dict[str, Any] | None) -> tuple[str, list[str]] | None:
    """("read" or "edit", the paths) for a call that reads or edits files, else None."""
    if not function:
        return None
    name = str(function.get("name", "")).lower()
    args = _args(function)
    path = _path(args)
    if name in EDITOR_TOOLS and path:
        return ("read" if args.get("command") == "view" else "edit", [path])
    if name in READ_TOOLS and path:
        return "read", [path]
    if name in EDIT_TOOLS:
        paths = [path] if path else _patched(args)
        return ("edit", paths) if paths else None
    command = next((args[k] for k in COMMAND_KEYS if isinstance(args.get(k), str)), "")
    return _shell(command) if command else None


def _patched(args: dict[str, Any]) -> list[str]:
    text = " ".join(v for v in args.values() if isinstance(v, str))
    return [_norm(a or b) for a, b in _PATCH_FILE.findall(text)]


@text_cache()  # each turn asks again of the same commands (tiered, traceback, forget)
def _shell(command: str) -> tuple[str, list[str]] | None:
    if "apply_patch" in command or "*** Begin Patch" in command:
        paths = _patched({"patch": command})
        return ("edit", paths) if paths else None
    words = shell_words(command)
    if words is None:
        return None
    if not words or any(w in ("&&", "||", ";", "|") for w in words):
        return None
    for op in (">", ">>"):
        if op in words[:-1]:
            return "edit", [_norm(words[words.index(op) + 1])]
    program = words[0].rsplit("/", 1)[-1]
    files = [w for w in words[1:] if not w.startswith("-") and ("/" in w or "." in w)]
    files = [w for w in files if not re.fullmatch(r"[\d,$p;]+", w)]
    if program == "sed" and any(w.startswith("-i") for w in words[1:]) and files:
        return "edit", [_norm(files[-1])]
    if program == "tee" and files:
        return "edit", [_norm(f) for f in files]
    if program in READ_PROGRAMS and len(files) == 1:
        return "read", [_norm(files[0])]
    return None


def live_reads(messages: Sequence[Message], ctx: Context) -> list[int]:
    """Indexes of tool outputs that are the newest read of a file the session edits (before
    or after that read), newest first, while they fit READS_SHARE of the room. A file only
    ever read is an ordinary output."""
    calls = calls_by_id(messages)
    newest: dict[str, int] = {}
    edited: set[str] = set()
    for i, msg in enumerate(messages):
        if msg.get("role") != "tool":
            continue
        action = file_action(calls.get(str(msg.get("tool_call_id"))))
        if action is None:
            continue
        kind, paths = action
        for path in paths:
            if kind == "read":
                newest[path] = i
            else:
                edited.add(path)
    order = sorted(((p, i) for p, i in newest.items() if p in edited), key=lambda kv: -kv[1])
    room = int(READS_SHARE * ctx.room()) if ctx.budget else 0
    held: list[int] = []
    for _, i in order:
        room -= ctx.count(messages[i])
        if room < 0:
            break
        held.append(i)
    return sorted(set(held))
