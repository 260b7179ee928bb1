"""A text cut to fit a room: its head and tail, the lines the conversation names, its evidence.

What the next step needs from an output too big for the room is most often at its start (a
header, the first fields, a page token), at its end (a verdict, a count), or in the lines that
hold a value the newest request names (a file, an order, an id). A form keeps those lines
verbatim and counts each gap; a JSON output stays valid JSON, its leading fields and its shape
kept, each cut array or object saying how much it lost. Every form names the original, so the
rest can be recalled. Each form is a pure function of the text, the names and a size.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from strategies.elide import MAX_PLAIN_LINE, render
from strategies.evidence import ranked
from strategies.ledger import CONCRETE
from strategies.memo import text_cache

NAMED_SHARE = 0.4  # of a form's characters, at most, for the named lines and their context
EVIDENCE_SHARE = 0.15  # for error evidence lines
TAIL_SHARE = 1 / 3  # of what head and tail share
RARE = 0.02  # a plain word names a line when it is in at most this share of the lines
_TOKEN = re.compile(r"`[^`\n]+`|\"[^\"\n]+\"|'[^'\n]+'|[\w@/\\.:+#$-]+")
_WORD = re.compile(r"[A-Za-z][A-Za-z'-]{3,}")
_EDGE = ".,:;!?()[]{}<>'\"`"


def names_in(texts: Iterable[str]) -> tuple[str, ...]:
    """The values a text names: numbers, identifiers, paths, quoted text (what CONCRETE
    matches), then its plain words of four letters or more; sorted, so forms are stable."""
    values: set[str] = set()
    words: set[str] = set()
    for text in texts:
        for token in _TOKEN.findall(text):
            token = token.strip(_EDGE)
            if len(token) >= 3 and CONCRETE.search(token):
                values.add(token)
        words.update(w.lower().strip("'-") for w in _WORD.findall(text))
    words -= {v.lower() for v in values}
    return tuple(sorted(values)) + tuple(sorted(w for w in words if len(w) >= 4))


def named_lines(lines: Sequence[str], names: Sequence[str]) -> list[int]:
    """Lines holding a named value (or a plain word rare in the text), the most specific name
    first: a name found on fewer lines tells more."""
    if not names:
        return []
    limit = max(1, int(RARE * len(lines)))
    found: list[tuple[int, int]] = []
    lowered = [line.lower() for line in lines]
    for name in names:
        if CONCRETE.search(name):
            hits = [i for i, line in enumerate(lines) if name in line]
        else:
            word = re.compile(rf"\b{re.escape(name)}\b")
            hits = [i for i, line in enumerate(lowered) if word.search(line)]
            if len(hits) > limit:
                continue
        found += [(len(hits), i) for i in hits]
    order: list[int] = []
    for _, i in sorted(found):
        if i not in order:
            order.append(i)
    return order


def text_form(
    text: str,
    names: Sequence[str],
    chars: int,
    note: Callable[[int, int], str],
    *,
    note_first: bool = True,
) -> str:
    """At most about `chars` characters of `text`'s lines: named lines with a line of context
    on each side, evidence, then head and tail; each gap counted; `note(kept, total)` first,
    or (`note_first` False: a user's own words lead their message) after the leading lines."""
    lines = text.split("\n")
    if len(lines) < 3:
        return _chars_form(text, chars, note, note_first)
    named, evidence = _orders(text, tuple(names))
    keep: set[int] = set()
    used = _take(lines, named, keep, NAMED_SHARE * chars)
    used += _take(lines, evidence, keep, used + EVIDENCE_SHARE * chars)
    rest = chars - used
    used += _take(lines, range(len(lines)), keep, used + rest * (1 - TAIL_SHARE))
    _take(lines, range(len(lines) - 1, -1, -1), keep, chars)
    body = render(lines, keep, [False] * len(lines))
    lead = 0 if note_first else next(i for i in range(len(lines) + 1) if i not in keep)
    return "\n".join([*body[:lead], note(len(keep), len(lines)), *body[lead:]])


@text_cache()
def _orders(text: str, names: tuple[str, ...]) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The named lines with their context, and the evidence lines, in the order a form takes
    them. Cached: the search for the longest form that fits asks for each size it tries."""
    lines = text.split("\n")
    named = _around(named_lines(lines, names), len(lines))
    return tuple(named), tuple(ranked(lines))


def _around(order: list[int], n: int) -> list[int]:
    """Each named line, then the line before and after it."""
    out: list[int] = []
    for i in order:
        out += [j for j in (i, i - 1, i + 1) if 0 <= j < n]
    return out


def _take(lines: Sequence[str], order: Iterable[int], keep: set[int], limit: float) -> int:
    """Add lines in `order` while the kept lines stay within `limit` characters; return the
    characters kept in all."""
    used = sum(len(lines[i]) + 1 for i in keep)
    for i in order:
        if i in keep:
            continue
        size = len(lines[i]) + 1
        if size > MAX_PLAIN_LINE or used + size > limit:
            if used >= limit:
                break
            continue
        keep.add(i)
        used += size
    return used


def _chars_form(text: str, chars: int, note: Callable[[int, int], str], note_first: bool) -> str:
    """One long line (or two): its first two thirds and its last third of `chars`, the note
    first or (a user's words lead) where the cut is."""
    tail = int(chars * TAIL_SHARE)
    head = max(chars - tail, 0)
    cut = max(len(text) - head - tail, 0)
    end = text[len(text) - tail :] if tail else ""
    gap = f"[… {cut:,} chars cut …]"
    if note_first:
        return f"{note(0, 1)}\n{text[:head]}\n{gap}\n{end}"
    return f"{text[:head]}\n{note(0, 1)} {gap}\n{end}"


# --- JSON ------------------------------------------------------------------------------------


def parsed(text: str) -> Any:
    """The JSON value of an output that is one object or array, else None."""
    start = text.lstrip()[:1]
    if start not in ("{", "["):
        return None
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return value if isinstance(value, dict | list) else None


def json_form(value: Any, text: str, names: Sequence[str], level: int, ref: str) -> str:
    """`value` with at most `level` leading items per array and fields per object (besides
    those that hold a named value, which stay whole), strings cut to a length that grows with
    `level`; each cut says what it left out, the first one names `ref`. Valid JSON, indented
    as the original was."""
    pruner = _Pruner(names, level, ref)
    pruned = pruner.prune(value, named=False)
    note = f"[ctxproxy: cut to fit the context window; {ref}]"
    if pruner.cuts == 0 or not pruner.ref_given:
        if isinstance(pruned, dict):
            pruned = {**pruned, "[ctxproxy]": note} if "[ctxproxy]" not in pruned else pruned
        else:
            pruned = [*pruned, note]
    return json.dumps(pruned, indent=_indent(text), ensure_ascii=False)


def _indent(text: str) -> int | None:
    lines = text.split("\n", 2)
    if len(lines) < 2:
        return None
    return max(len(lines[1]) - len(lines[1].lstrip(" ")), 1)


class _Pruner:
    def __init__(self, names: Sequence[str], level: int, ref: str) -> None:
        self.values = [n for n in names if CONCRETE.search(n)]
        self.level, self.ref = max(level, 1), ref
        self.chars = 16 + 16 * level
        self.cuts, self.ref_given = 0, False

    def _mentions(self, value: Any) -> bool:
        if not self.values or isinstance(value, bool | int | float) or value is None:
            return False
        text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
        return any(v in text for v in self.values)

    def _marker(self, what: str) -> str:
        self.cuts += 1
        if self.ref_given:
            return f"[… {what} cut]"
        self.ref_given = True
        return f"[… {what} cut to fit the context window; {self.ref}]"

    def prune(self, value: Any, *, named: bool) -> Any:
        if isinstance(value, str):
            if len(value) <= self.chars:
                return value
            return f"{value[: self.chars]}…[+{len(value) - self.chars:,} chars]"
        if isinstance(value, list):
            return self._list(value, named)
        if isinstance(value, dict):
            return self._dict(value, named)
        return value

    def _list(self, items: list[Any], named: bool) -> list[Any]:
        n = self.level
        keep = set(range(min(n, len(items))))
        if n >= 2 and items:
            keep.add(len(items) - 1)
        hits = [i for i, v in enumerate(items) if i not in keep and self._mentions(v)]
        keep.update(hits[:n])
        out: list[Any] = []
        gap = 0
        for i, item in enumerate(items):
            if i not in keep:
                gap += 1
                continue
            if gap:
                out.append(self._marker(f"{gap:,} {'item' if gap == 1 else 'items'}"))
                gap = 0
            out.append(self.prune(item, named=named or i in hits))
        if gap:
            out.append(self._marker(f"{gap:,} {'item' if gap == 1 else 'items'}"))
        return out

    def _dict(self, fields: dict[str, Any], named: bool) -> dict[str, Any]:
        keys = list(fields)
        keep = set(keys) if named else set(keys[: self.level])
        keep.update(k for k in keys if k not in keep and self._mentions(fields[k]))
        out = {k: self.prune(fields[k], named=named) for k in keys if k in keep}
        left = len(keys) - len(keep)
        if left and "…" not in out:
            out["…"] = self._marker(f"{left:,} more {'field' if left == 1 else 'fields'}")
        return out
