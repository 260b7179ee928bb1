"""What produced a tool output: a call that showed content (read, grep, list) or one that ran.

A file that was read, searched or listed may hold any words (`ERROR` in logging's source, a
`FAILED` in a test fixture); only what a command that ran printed can be that run's failure.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Iterable, Sequence
from typing import Any

from strategies.memo import text_cache
from strategies.messages import Message, tool_calls

# Tools of the agent CLIs and frameworks that only show content.
VIEWING_TOOLS = frozenset(
    {
        "read", "read_file", "readfile", "view", "view_file", "open_file", "cat", "grep",
        "glob", "ls", "list", "list_dir", "list_directory", "list_files", "find", "find_files",
        "search", "search_files", "grep_search", "file_search", "codebase_search", "rg",
        "notebookread", "webfetch", "fetch", "read_many_files", "search_file_content",
    }
)  # fmt: skip
# Programs that print files, search them or list them, whatever is in them.
VIEWING_PROGRAMS = frozenset(
    {
        "cat", "bat", "less", "more", "head", "tail", "sed", "awk", "nl", "grep", "egrep",
        "fgrep", "rg", "ag", "ack", "ls", "find", "fd", "tree", "wc", "stat", "file", "jq",
        "yq", "diff", "xxd", "od", "strings", "echo", "printf", "pwd", "du", "realpath",
    }
)  # fmt: skip
VIEWING_GIT = frozenset({"show", "diff", "log", "grep", "blame", "ls-files", "status", "cat-file"})
NEUTRAL = frozenset({"cd", "pushd", "popd", "export", "set", "true", "sort", "uniq", "cut", "tr"})
COMMAND_KEYS = ("command", "cmd", "script", "shell", "code", "input")
_SEPARATORS = re.compile(r"&&|\|\||[;|\n]")
_ASSIGNMENT = re.compile(r"^[A-Za-z_]\w*=")


def call_of(messages: Sequence[Message], tool_call_id: Any) -> dict[str, Any] | None:
    """The function (name, arguments) of the call a tool message answers, if it is there."""
    for msg in reversed(messages):
        for call in tool_calls(msg):
            if call.get("id") == tool_call_id and isinstance(call.get("function"), dict):
                return call["function"]
    return None


def calls_by_id(messages: Iterable[Message]) -> dict[str, dict[str, Any]]:
    """tool_call_id -> its function (name, arguments)."""
    out = {}
    for msg in messages:
        for call in tool_calls(msg):
            if isinstance(call.get("id"), str) and isinstance(call.get("function"), dict):
                out[call["id"]] = call["function"]
    return out


def is_viewing(function: dict[str, Any] | None) -> bool:
    """Whether the call only showed content: a viewing tool, or a shell command whose every
    step prints, searches or lists files."""
    if not function:
        return False
    name = str(function.get("name", "")).lower()
    if name in VIEWING_TOOLS:
        return True
    command = _command(function.get("arguments"))
    return bool(command) and viewing_command(command)


def _command(arguments: Any) -> str:
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except ValueError:
            return ""
    if not isinstance(arguments, dict):
        return ""
    value = next((arguments[k] for k in COMMAND_KEYS if k in arguments), "")
    if isinstance(value, list):
        value = " ".join(str(v) for v in value)
    return value if isinstance(value, str) else ""


@text_cache()
def shell_words(command: str) -> tuple[str, ...] | None:
    """The command line split as a POSIX shell would (`shlex.split`), None for an unclosed
    quote. Cached: a forget marker's work record reads every forgotten call at each firing."""
    try:
        return tuple(shlex.split(command))
    except ValueError:
        return None


@text_cache()
def viewing_command(command: str) -> bool:
    """Every step of the command line (split at `&&`, `;`, `|`) shows content or is neutral,
    and at least one shows content."""
    seen = False
    for words in _steps(command):
        while words and (_ASSIGNMENT.match(words[0]) or words[0] in ("sudo", "env", "time")):
            words = words[1:]
        if not words:
            continue
        program = words[0].rsplit("/", 1)[-1]
        if program == "git":
            sub = next((w for w in words[1:] if not w.startswith("-")), "")
            if sub not in VIEWING_GIT:
                return False
            seen = True
        elif program in VIEWING_PROGRAMS:
            seen = True
        elif program not in NEUTRAL:
            return False
    return seen


def _steps(command: str) -> list[list[str]]:
    """The command line's steps as words, split at `&&`, `||`, `;`, `|`, `&` and new lines
    outside quotes (`grep "Error|Traceback"` is one step)."""
    lexer = shlex.shlex(command.replace("\n", ";"), posix=True, punctuation_chars=";&|")
    lexer.whitespace_split = True
    try:
        tokens = list(lexer)
    except ValueError:  # an unclosed quote: the plain words still name the programs
        return [step.split() for step in _SEPARATORS.split(command)]
    steps: list[list[str]] = [[]]
    for token in tokens:
        if token and set(token) <= set(";&|"):
            steps.append([])
        else:
            steps[-1].append(token)
    return steps
