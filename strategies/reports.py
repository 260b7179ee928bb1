"""Which lines of a test report name the failing tests and where they failed.

A folded report must still say which test failed and where, beside its `E` lines: the test's
header (`____ test_f ____`), its location lines (`tests/x.py:12: in test_f`, `app.py:8:
AttributeError`), the first `E` line of its block, and the summary (`FAILED tests/x.py::test_f
- ...`, Go's `--- FAIL: TestF`).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

HEADER = re.compile(r"^_{3,} (\S.*?) _{3,}$")
SECTION = re.compile(r"^={3,}")
LOCATION = re.compile(r"^[\w./\\-]+:\d+:(?: in \S+| \w+)?\s*$|^\s+\S+_test\.go:\d+: ")
E_LINE = re.compile(r"^E\s+\S")
SUMMARY = re.compile(r"^(?:FAILED|ERROR) \S|^\s*--- FAIL: |^FAIL\s+\S")


def naming_lines(lines: Sequence[str]) -> list[int]:
    """Indexes of the lines that name each failing test and its place, most needed first:
    per failure block its header, first and last location and first `E` line, in report
    order; then the summary lines. Empty when the text is no failing-test report."""
    blocks: list[list[int]] = []
    summaries: list[int] = []
    current: list[int] | None = None
    for i, line in enumerate(lines):
        if HEADER.match(line):
            current = [i]
            blocks.append(current)
        elif SECTION.match(line):
            current = None
        elif SUMMARY.match(line):
            summaries.append(i)
        elif current is not None and (LOCATION.match(line) or E_LINE.match(line)):
            current.append(i)
    out: list[int] = []
    for block in blocks:
        header, rest = block[0], block[1:]
        places = [i for i in rest if LOCATION.match(lines[i])]
        errors = [i for i in rest if E_LINE.match(lines[i])]
        if not places and not errors:
            continue  # a header of some other section (captured output, warnings)
        out += sorted({header, *places[:1], *places[-1:], *errors[:1]})
    return out + summaries
