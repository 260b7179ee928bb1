"""The whole unit around a query's hit, so a recall can stand in for a re-read.

For code, the enclosing function or class (by indentation, and a closing brace at the header's
indentation for brace languages); for a test report, the failure block (from its `____ name
____` header to the next one), also when the hit is the summary's `FAILED …::name` line; for a
chat message (the user's or the assistant's), the whole message. Line ranges are half-open.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

# A line-number gutter as `cat -n` or an agent's read tool prints it: indentation is after it.
GUTTER = re.compile(r"^\s*\d+(?:→|\t|: |\| )")
DEFINITION = re.compile(
    r"^(?:@\w|(?:export\s+)?(?:default\s+)?(?:pub(?:\([^)]*\))?\s+)?(?:async\s+)?(?:static\s+)?"
    r"(?:def|class|function|func|fn|impl|struct|enum|trait|interface|module|object|type)\b)"
)
# A C-like signature or a method that opens its body on the same line.
SIGNATURE = re.compile(r"^[\w<>\[\]*&:,\s]+\([^;]*\)\s*(?:const\s*)?(?:->\s*[^{]+)?\{\s*$")
CLOSER = re.compile(r"^[}\])](?:[;,)]*\s*)$|^end\b")
HEADER = re.compile(r"^_{3,} (\S.*?) _{3,}$")
SECTION = re.compile(r"^={3,}|^-{3,} Captured ")
SUMMARY = re.compile(r"^(?:FAILED|ERROR) \S*::(\S+?)(?: - .*)?$")
MAX_CLIMB = 400  # lines searched upward for an enclosing definition


def _code(line: str) -> str:
    m = GUTTER.match(line)
    return line[m.end() :] if m else line


def _indent(line: str) -> int | None:
    body = _code(line)
    return None if not body.strip() else len(body) - len(body.lstrip())


def report_block(lines: Sequence[str], hit: int) -> tuple[int, int] | None:
    """The failure block holding line `hit`, or the one its summary line names."""
    named = SUMMARY.match(lines[hit])
    if named:
        name = named.group(1)
        for i, line in enumerate(lines):
            h = HEADER.match(line)
            if h and (h.group(1) == name or h.group(1).endswith(("." + name, "::" + name))):
                return i, _block_end(lines, i)
        return None
    for i in range(hit, -1, -1):
        if HEADER.match(lines[i]):
            return i, _block_end(lines, i)
        if SECTION.match(lines[i]):
            return None
    return None


def _block_end(lines: Sequence[str], start: int) -> int:
    end = start + 1
    while end < len(lines) and not HEADER.match(lines[end]) and not SECTION.match(lines[end]):
        end += 1
    return end


def enclosing_definition(lines: Sequence[str], hit: int) -> tuple[int, int] | None:
    """The innermost function or class holding line `hit` (or starting on it), decorators
    included; None when the hit is in no definition."""
    start = _header(lines, hit)
    if start is None:
        return None
    base = _indent(lines[start]) or 0
    while start > 0 and _code(lines[start - 1]).strip().startswith("@"):
        start -= 1  # decorators belong to what they decorate
    end = start + 1
    while end < len(lines) and (_code(lines[end]).lstrip().startswith("@") or end <= hit):
        end += 1  # through the decorated header and past the hit
    last = end
    while end < len(lines):
        indent = _indent(lines[end])
        body = _code(lines[end]).strip()
        if indent is not None and indent <= base and not (body[:1] in ")]" and body[-1] == ":"):
            if CLOSER.match(body):
                last = end + 1
            break
        if indent is not None:
            last = end + 1
        end += 1
    return start, max(last, hit + 1)


def _header(lines: Sequence[str], hit: int) -> int | None:
    if _is_header(lines[hit]):
        return hit
    floor = _indent(lines[hit])
    floor = 10**6 if floor is None else floor
    for i in range(hit - 1, max(hit - MAX_CLIMB, -1), -1):
        indent = _indent(lines[i])
        if indent is None or indent >= floor:
            continue
        if _is_header(lines[i]):
            return i
        floor = indent
        if indent == 0:
            return None
    return None


def _is_header(line: str) -> bool:
    body = _code(line).strip()
    return bool(DEFINITION.match(body) and not body.startswith("@") or SIGNATURE.match(body))
