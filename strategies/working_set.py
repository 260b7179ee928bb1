"""The working set: what the next step most likely needs, kept even when it is not recent.

The newest output of a command that failed (a traceback, a compiler diagnostic, a non-zero
exit) and the newest one that reports failing tests. Which outputs qualify is decided by their
structure and by the call that produced them: what a read, a grep or a listing showed is never
the working set, whatever words the file held, and a log-level word alone makes nothing an
error. Deeper folds and forgetting leave the working set alone until the budget leaves no
other choice.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from itertools import groupby

from strategies.calls import calls_by_id, is_viewing
from strategies.context import Context
from strategies.evidence import bears_failure
from strategies.memo import text_cache
from strategies.messages import Message, iterations, text_of
from strategies.reads import live_reads

FAILING_TESTS = re.compile(
    r"^(?:FAILED|ERROR) \S+(?:::| - )|^\s*--- FAIL: |^test \S+ \.\.\. FAILED$|^\s+[✕×] "
    r"|^FAIL\s+\S|^=+ [^\n]{0,200}?\b\d+ (?:failed|errors?)\b[^\n]{0,200}? =+$",
    re.MULTILINE,
)
# How runners and agent CLIs report a command's non-zero exit status.
NONZERO_EXIT = re.compile(
    r"\b(?:exit(?:ed)?(?: with)? (?:code|status)|exit_code|return ?code|returncode)[\"']?"
    r"\s*[:=]?\s*[\"']?(?:[1-9]\d*|-\d+)\b",
    re.IGNORECASE,
)


@text_cache()
def lists_failing_tests(text: str) -> bool:
    return FAILING_TESTS.search(text) is not None


@text_cache()
def is_error_output(text: str) -> bool:
    """A traceback, a panic, a compiler or test failure, or a reported non-zero exit."""
    # Runners report the exit at the end, Codex's exec in a header before the output.
    exits = NONZERO_EXIT.search(text[-400:]) or NONZERO_EXIT.search(text[:400])
    return bears_failure(text) or exits is not None


def working_set(messages: Sequence[Message], ctx: Context) -> list[int]:
    """Indexes of the newest error output and the newest failing-test list (one or two)."""
    found: dict[str, int] = {}
    calls = calls_by_id(messages)
    for i in range(len(messages) - 1, -1, -1):
        if len(found) == 2:
            break
        if messages[i].get("role") != "tool":
            continue
        if is_viewing(calls.get(str(messages[i].get("tool_call_id")))):
            continue  # content shown, not a run's outcome
        raw = ctx.lineage.origin(messages[i]) if ctx.lineage else messages[i]
        text = text_of(raw)
        if not text:
            continue
        if "error" not in found and is_error_output(text):
            found["error"] = i
        if "tests" not in found and lists_failing_tests(text):
            found["tests"] = i
    return sorted(set(found.values()))


def footing(messages: Sequence[Message], ctx: Context) -> list[int]:
    """What tiered folds only once the keep window is gone and `forget` leaves until the last
    resort: the working set and the newest reads of files the agent edits (strategies/reads.py;
    a read forgotten goes whole, and the agent reads the file again)."""
    return sorted(set(working_set(messages, ctx)) | set(live_reads(messages, ctx)))


def raw_count(msg: Message, ctx: Context) -> int:
    """Tokens of the message as the client sent it: what a fold would free."""
    return ctx.count(ctx.lineage.origin(msg) if ctx.lineage else msg)


def first_steps(
    messages: Sequence[Message], ctx: Context, share: float, *, verbatim: bool = False
) -> set[int]:
    """The steps after the task that `forget` keeps below FORGET_ANY: whole iterations, oldest
    first, while they fit `share` (keep_first) of the room as they were sent, so the head is a
    look around a project, never a run of placeholders. With `verbatim`, it ends at the first
    step that is no longer as sent (folded in an earlier view)."""
    iters = iterations(messages)
    task = next((i for i, m in enumerate(messages) if m.get("role") == "user"), None)
    if task is None:
        return set()
    head = int(share * ctx.room())
    kept: set[int] = set()
    for _, group in groupby(range(task + 1, len(messages)), key=lambda i: iters[i]):
        idx = list(group)
        head -= sum(raw_count(messages[i], ctx) for i in idx)
        changed = ctx.lineage is not None and any(ctx.lineage.label(messages[i]) for i in idx)
        if head < 0 or verbatim and changed:
            break
        kept.update(idx)
    return kept


def newest_output(messages: Sequence[Message]) -> list[int]:
    """Indexes of the tool messages that answer the newest assistant message with tool calls:
    what the next step reads first. Forgetting leaves it alone until the last resort, and
    whatever room a firing leaves goes to it (strategies/cut.py)."""
    for k in range(len(messages) - 1, -1, -1):
        msg = messages[k]
        if msg.get("role") == "assistant" and msg.get("tool_calls"):
            ids = {c.get("id") for c in msg["tool_calls"] if isinstance(c, dict)}
            return [
                i
                for i in range(k + 1, len(messages))
                if messages[i].get("role") == "tool" and messages[i].get("tool_call_id") in ids
            ]
    return []
