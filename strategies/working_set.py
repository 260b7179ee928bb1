"""The working set: what the next step most likely needs, kept even when it is not recent.

The newest tool output that carries error evidence (a traceback, a compiler error) and the
newest one that lists failing tests. Deeper folds and forgetting leave them alone until the
budget leaves no other choice.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from strategies.base import Context, Message, text_of
from strategies.evidence import bears_evidence
from strategies.memo import text_cache

FAILING_TESTS = re.compile(
    r"^(?:FAILED|ERROR) \S|^\s*--- FAIL: |^test \S+ \.\.\. FAILED$|^\s+[✕×] |^FAIL\s+\S",
    re.MULTILINE,
)


@text_cache()
def lists_failing_tests(text: str) -> bool:
    return FAILING_TESTS.search(text) is not None


def working_set(messages: Sequence[Message], ctx: Context) -> list[int]:
    """Indexes of the newest error output and the newest failing-test list (one or two)."""
    found: dict[str, int] = {}
    for i in range(len(messages) - 1, -1, -1):
        if len(found) == 2:
            break
        if messages[i].get("role") != "tool":
            continue
        raw = ctx.lineage.origin(messages[i]) if ctx.lineage else messages[i]
        text = text_of(raw)
        if not text:
            continue
        if "error" not in found and bears_evidence(text):
            found["error"] = i
        if "tests" not in found and lists_failing_tests(text):
            found["tests"] = i
    return sorted(set(found.values()))
