"""Line-level elision: keep chosen lines verbatim, replace each gap with a marker that counts it."""

from __future__ import annotations

import re
from collections.abc import Sequence

from strategies.evidence import evidence
from strategies.memo import text_cache

_VOLATILE = re.compile(r"0x[0-9a-fA-F]+|[0-9a-fA-F]{8,}|\d+")
_SPACE = re.compile(r"\s+")
SIMILAR_WINDOW = 3  # a line repeats if it matches one of the previous 3 (catches a-b-a-b logs)
MAX_PLAIN_LINE = 1000  # longer non-evidence lines are never kept as head or tail


def line_key(line: str) -> str:
    """Lines that differ only in numbers, hashes or spacing count as near-identical."""
    return _SPACE.sub(" ", _VOLATILE.sub("#", line)).strip()


def repeats(lines: Sequence[str]) -> list[bool]:
    keys = [line_key(s) for s in lines]
    return [bool(k) and k in keys[max(0, i - SIMILAR_WINDOW) : i] for i, k in enumerate(keys)]


def _edge(lines: Sequence[str], order: range, count: int, rep: list[bool]) -> set[int]:
    """The first `count` lines in `order` that are neither repeats nor overlong."""
    picked: set[int] = set()
    for i in order:
        if len(picked) >= count:
            break
        if not rep[i] and len(lines[i]) <= MAX_PLAIN_LINE:
            picked.add(i)
    return picked


def select(lines: Sequence[str], head: int, tail: int) -> tuple[set[int], list[bool]]:
    """Evidence, head and tail; then inside that, a run of near-identical lines keeps only its
    first line, except the line that ends an evidence block (usually the exception line)."""
    rep = repeats(lines)
    ev = evidence(lines)
    keep = ev | _edge(lines, range(len(lines)), head, rep)
    keep |= _edge(lines, range(len(lines) - 1, -1, -1), tail, rep)
    block_ends = {i for i in ev if i + 1 not in ev}
    return {i for i in keep if not rep[i] or i in block_ends}, rep


def render(lines: Sequence[str], keep: set[int], rep: list[bool]) -> list[str]:
    """Kept lines as they were; each run of dropped lines becomes one counted marker.

    A single dropped line is kept instead when it is short, since its marker would cost as much.
    """
    out: list[str] = []
    i, n = 0, len(lines)
    while i < n:
        if i in keep:
            out.append(lines[i])
            i += 1
            continue
        j = i
        while j < n and j not in keep:
            j += 1
        if j - i == 1 and len(lines[i]) <= 40:
            out.append(lines[i])
        else:
            similar = all(rep[i:j])
            out.append(marker(j - i, similar))
        i = j
    return out


def marker(count: int, similar: bool = False) -> str:
    kind = "similar lines" if similar else ("line" if count == 1 else "lines")
    return f"[… {count:,} {kind} elided …]"


@text_cache()
def elide(text: str, head: int, tail: int) -> tuple[str, int, int] | None:
    """Evidence, head and tail verbatim, the rest as markers.

    Returns (body, lines kept, lines total), or None when eliding would not save a tenth.
    Cached: the same old output is elided again on every turn of a session.
    """
    lines = text.split("\n")
    keep, rep = select(lines, head, tail)
    body = "\n".join(render(lines, keep, rep))
    if len(body) > 0.9 * len(text):
        return None
    return body, len(keep), len(lines)
