"""Line search for ctxproxy_recall queries: linear time (RE2) and under a deadline.

A query comes from the model, and what it searches may hold text planted by anyone (a file,
a web page), so Python's backtracking `re` never runs it: RE2 does, and a pattern RE2 cannot
run (a backreference, a lookaround) is searched for as literal words instead.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import dataclass

import re2

MAX_QUERY = 1000  # characters: a longer query is a bad call, not a bigger automaton
_REGEX_HINT = re.compile(r"[\\^$.|?*+()\[\]{}]")

# Memory for RE2's compiled program and DFA cache: a large pattern fails to compile (a bad
# call) and a pattern whose DFA outgrows the cache falls back to RE2's linear NFA.
_OPTIONS = re2.Options()
_OPTIONS.case_sensitive = False
_OPTIONS.log_errors = False  # a pattern it refuses is the model's mistake, not our log's
_OPTIONS.max_mem = 8 << 20


class BadQuery(ValueError):
    """The query cannot be searched for: too long, or not a regular expression at all."""


@dataclass(frozen=True)
class Search:
    """Finds the lines of a text that match a query; `how` says what ran, for the result."""

    lines: Callable[[str], list[int]]
    how: str  # "regex", "words", or "words (RE2 cannot run this pattern)"


def compile_query(query: str) -> Search:
    """A Search for `query`: a regex when it looks like one, else lines holding every word."""
    if len(query) > MAX_QUERY:
        raise BadQuery(f"the query is {len(query):,} characters; keep it under {MAX_QUERY:,}")
    if not _REGEX_HINT.search(query):
        return Search(_words(query.split()), "words")
    try:
        pattern = re2.compile(b"(?m)" + query.encode(), options=_OPTIONS)
    except re2.error:
        pass
    else:
        return Search(_regex(pattern), "regex")
    try:  # only to tell a pattern RE2 lacks from no pattern at all: compiling never backtracks
        re.compile(query)
    except (re.error, RecursionError, OverflowError) as exc:
        raise BadQuery(f'"{query[:80]}" is not a valid regular expression') from exc
    words = re.findall(r"\w{3,}", re.sub(r"\\.", " ", query))  # the literal words, no \w or \1
    if not words:
        raise BadQuery(f'"{query[:80]}" uses what RE2 cannot run, and holds no word to look for')
    return Search(
        _words(words), "words (RE2 cannot run this pattern: no backreferences or lookarounds)"
    )


def _regex(pattern: re2._Regexp) -> Callable[[str], list[int]]:
    def lines(text: str) -> list[int]:
        data = text.encode(errors="replace")
        found, pos, line, counted = [], 0, 0, 0
        while pos <= len(data):
            m = pattern.search(data, pos)
            if m is None:
                break
            start = m.start()
            line += data.count(b"\n", counted, start)  # lines before the match, counted once
            counted = start
            found.append(line)
            nl = data.find(b"\n", start)
            if nl < 0:
                break
            pos = counted = nl + 1  # one hit per line: the next search starts on the next line
            line += 1
        return found

    return lines


def _words(words: list[str]) -> Callable[[str], list[int]]:
    """Lines holding every word, any case: str.find for the first, the line for the rest."""
    lowered = [w.lower() for w in words]
    first, rest = lowered[0], lowered[1:]

    def lines(text: str) -> list[int]:
        low = text.lower()
        found, pos, line, counted = [], 0, 0, 0
        while (at := low.find(first, pos)) >= 0:
            begin = low.rfind("\n", 0, at) + 1
            end = low.find("\n", at)
            end = len(low) if end < 0 else end
            line += low.count("\n", counted, begin)
            counted = begin
            if all(w in low[begin:end] for w in rest):
                found.append(line)
            pos = end + 1
        return found

    return lines


class Deadline:
    """A point in time a search must stop at; checked between messages."""

    def __init__(self, seconds: float) -> None:
        self.at = time.monotonic() + seconds

    def passed(self) -> bool:
        return time.monotonic() >= self.at
