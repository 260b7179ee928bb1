"""Find the lines of a tool output that carry the error: tracebacks, test failures, compiler errors.

Each rule is a start pattern plus how far the evidence block runs after it. The result is a set
of line indexes; callers keep those lines verbatim and elide the rest.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from strategies.memo import text_cache

Lines = Sequence[str]
# Given the lines and the start index, return the indexes of the block (start included).
Extent = Callable[[Lines, int], range | list[int]]

INDENTED = re.compile(r"^(?:\s|[|+] |\s*\^)")
BLANK = re.compile(r"^\s*$")
EXC_LINE = re.compile(
    r"^(?:Uncaught )?(?:[\w$]+\.)*[A-Z][\w$]*(?:Error|Exception|Failure|Fault|Exit|Interrupt"
    r"|Warning|Group)(?: \[[\w-]+\])?(?::\s.*)?$"
)
FRAME = re.compile(r"^\s+(?:at |\.\.\. \d+ (?:more|common frames omitted))")
CODE_FRAME = re.compile(r"^\s*(?:\d+\s*)?\|| *--> |^\s*= (?:note|help): |^\s+\^")


def _matches(pattern: re.Pattern[str]) -> Callable[[str], bool]:
    return lambda s: pattern.match(s) is not None


def _one(lines: Lines, i: int) -> range:
    return range(i, i + 1)


def _following(limit: int, keep: Callable[[str], bool]) -> Extent:
    """The start line plus following lines while `keep` holds, at most `limit` of them."""

    def extent(lines: Lines, i: int) -> range:
        end = i + 1
        while end < len(lines) and end - i <= limit and keep(lines[end]):
            end += 1
        return range(i, end)

    return extent


def _python_traceback(lines: Lines, i: int) -> list[int]:
    """Header, frames (the first few and the last ones), and the exception line with its message."""
    end = i + 1
    while end < len(lines) and INDENTED.match(lines[end]) and not BLANK.match(lines[end]):
        end += 1
    frames = list(range(i, end))
    if len(frames) > 40:
        # Deep recursion: the entry frames and the failing frames are what explain it.
        frames = frames[:7] + frames[-30:]
    message = _following(8, lambda s: not BLANK.match(s))(lines, end) if end < len(lines) else []
    return frames + list(message)


def _until_blank(limit: int) -> Extent:
    return _following(limit, lambda s: not BLANK.match(s))


def _code_frame(limit: int) -> Extent:
    return _following(limit, lambda s: bool(CODE_FRAME.match(s)) or s.startswith("   "))


@dataclass(frozen=True)
class Rule:
    family: str
    start: re.Pattern[str]
    extent: Extent = _one


RULES: tuple[Rule, ...] = (
    # Python, including chained exceptions and exception groups.
    Rule(
        "python",
        re.compile(
            r"^[\s|+]*(?:Traceback \(most recent call last\):|"
            r"Exception Group Traceback)"
        ),
        _python_traceback,
    ),
    Rule(
        "python",
        re.compile(
            r"^(?:During handling of the above exception|"
            r"The above exception was the direct cause)"
        ),
    ),
    # pytest
    Rule("pytest", re.compile(r"^_{3,} .+ _{3,}$")),
    Rule(
        "pytest", re.compile(r"^>\s"), _following(2, lambda s: bool(re.match(r"^\s+[\^~]+\s*$", s)))
    ),
    Rule("pytest", re.compile(r"^E\s")),
    Rule("pytest", re.compile(r"^[\w./\\-]+\.py:\d+: \w+$")),
    Rule("pytest", re.compile(r"^={3,} short test summary info ={3,}$")),
    Rule("pytest", re.compile(r"^(?:FAILED|ERROR) \S")),
    Rule("pytest", re.compile(r"^=+ .*\b(?:failed|passed|errors?|skipped|xfailed)\b.* =+$")),
    # Node / JavaScript / Java / Kotlin: exception line plus its first frames.
    Rule("js", re.compile(r"^\S.*\.(?:[cm]?[jt]sx?):\d+$"), _following(2, lambda s: True)),
    Rule("jvm", re.compile(r'^Exception in thread ".*"'), _following(8, _matches(FRAME))),
    Rule("jvm", re.compile(r"^(?:Caused by|\s+Suppressed): "), _following(5, _matches(FRAME))),
    Rule("exception", EXC_LINE, _following(8, _matches(FRAME))),
    # Go
    Rule("go", re.compile(r"^(?:panic|fatal error): "), _until_blank(4)),
    Rule("go", re.compile(r"^goroutine \d+ \[.*\]:$"), _until_blank(16)),
    Rule("go", re.compile(r"^\s*--- FAIL: |^FAIL\s|^\s+\S+_test\.go:\d+: ")),
    # Rust
    Rule("rust", re.compile(r"^thread '.*' panicked at"), _following(1, lambda s: True)),
    Rule("rust", re.compile(r"^error(?:\[E\d+\])?: "), _until_blank(14)),
    Rule("rust", re.compile(r"^stack backtrace:$"), _following(12, _matches(INDENTED))),
    # C, C++, Go and TypeScript compilers, linkers and make.
    Rule("cc", re.compile(r"^\S[^:]*:\d+:\d+: (?:fatal )?error: "), _code_frame(4)),
    Rule("cc", re.compile(r"^\S[^:]*: In (?:function|member function|instantiation) ")),
    Rule("cc", re.compile(r"required from here$|undefined reference to |^collect2: error: ")),
    Rule("cc", re.compile(r"^make(?:\[\d+\])?: \*\*\* ")),
    Rule(
        "ts",
        re.compile(r"^\S+\(\d+,\d+\): error TS\d+: |^\S+:\d+:\d+ - error TS\d+: "),
        _code_frame(4),
    ),
    # Log levels that say something failed, whatever the language.
    Rule("log", re.compile(r"\b(?:ERROR|FATAL|CRITICAL|PANIC)\b|^(?:error|fatal): ")),
)

GENERIC_LIMIT = 20  # log-level lines can be thousands; the last ones are the most recent state


def evidence(lines: Lines) -> set[int]:
    """Indexes of the lines to keep verbatim. Blocks never run past the end of `lines`."""
    keep: set[int] = set()
    generic: list[int] = []
    for i, line in enumerate(lines):
        if i in keep:
            continue
        rule = next((r for r in RULES if r.start.search(line)), None)
        if rule is None:
            continue
        if rule.family == "log":
            generic.append(i)
        else:
            keep.update(rule.extent(lines, i))
    keep.update(generic[-GENERIC_LIMIT:])
    return keep


# --- ranking: which evidence lines to keep when only a few fit ---------------------------------

_E_PREFIX = re.compile(r"^E\s+")
HEADLINE = re.compile(
    r"^(?:error(?:\[E\d+\])?|fatal error|panic): |^thread '.*' panicked at|^Exception in thread "
    r"|^Caused by: |^\S[^:]*:\d+:\d+: (?:fatal )?error: |\(\d+,\d+\): error TS\d+: "
    r"| - error TS\d+: |^\s*--- FAIL: |undefined reference to "
)
LOCATION = re.compile(
    r'^\s*File ".*", line \d+|^\s*--> \S+:\d+|^\S.*\.[cm]?[jt]sx?:\d+$'
    r"|^\s+at .*:\d+:\d+\)?$|required from here$|^\s+\S+_test\.go:\d+: |^(?:FAILED|ERROR|FAIL) \S"
    r"|^make(?:\[\d+\])?: \*\*\* "
)
# pytest's `E` lines (the assertion and the exception raised) and an exception line named by
# its class alone (`decimal.InvalidOperation: ...`, which EXC_LINE's suffixes do not cover).
ASSERTION = re.compile(r"^E\s+\S|^(?:[a-z_]\w*\.)*[A-Z]\w*(?::\s.*)?$")
TRAILER = re.compile(r"^error: (?:aborting due to|could not compile)")
# Carets, gutters and rules say nothing on their own; runtime-internal frames rarely help.
NOISE = re.compile(r"^[\s|^~+\-_=.]*$|^\s+at .*(?:\(node:internal/|\(native\)$)")


def _tier(line: str) -> int:
    bare = _E_PREFIX.sub("", line)
    if TRAILER.match(line) or NOISE.match(line):
        return 3
    if EXC_LINE.match(bare.strip()) or HEADLINE.search(line) or ASSERTION.match(line):
        return 0
    return 1 if LOCATION.search(line) else 2


def _both_ends(indexes: list[int]) -> list[int]:
    """Last, first, second last, second…: a runtime's final exception comes last, a compiler's
    root error first, and a short excerpt should hold both."""
    out, lo, hi = [], 0, len(indexes) - 1
    while lo <= hi:
        out.append(indexes[hi])
        if lo < hi:
            out.append(indexes[lo])
        lo, hi = lo + 1, hi - 1
    return out


def ranked(lines: Lines) -> list[int]:
    """The evidence lines, most telling first: error and exception lines, then locations and
    failed tests, then the rest of the blocks; lines with nothing to read alone are left out."""
    tiers: dict[int, list[int]] = {0: [], 1: [], 2: [], 3: []}
    for i in sorted(evidence(lines)):
        tiers[_tier(lines[i])].append(i)
    return [i for t in (0, 1, 2) for i in _both_ends(tiers[t])]


@text_cache()
def bears_evidence(text: str) -> bool:
    """Whether any line of the text starts an evidence block. Cached: asked on every compaction."""
    return any(r.start.search(line) for line in text.split("\n") for r in RULES)


STRUCTURAL = tuple(r for r in RULES if r.family != "log")


@text_cache()
def bears_failure(text: str) -> bool:
    """Whether the text holds a failure by its structure (a traceback, a panic, a compiler
    diagnostic, a failing-test report), not a log-level word alone."""
    return any(r.start.search(line) for line in text.split("\n") for r in STRUCTURAL)
