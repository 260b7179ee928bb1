"""Whether a recall stood in for a re-read: what the client's next step did after it.

A recall that helped is not followed by a read of the file it brought back; one that did not
is (its result was a fragment, or it found nothing and the agent went to look). Each recall
record of an exchange gets `reread`: the answer that ended the exchange reads a file the
recall's result came from, or, when the recall brought nothing back, reads any file. The audit
shows it per call; `reread_share` sums it over records.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from strategies.calls import calls_by_id
from strategies.reads import file_action

# The label of each section of a recall result names the call that produced the message.
_LABEL_PATH = re.compile(
    r'^--- history:\d+ \(tool [^\n]*?"(?:path|file_path|filename|file|target_file)": ?"([^"]+)"',
    re.MULTILINE,
)


def _reads(answer: dict[str, Any]) -> set[str]:
    calls = calls_by_id([answer])
    paths: set[str] = set()
    for function in calls.values():
        action = file_action(function)
        if action is not None and action[0] == "read":
            paths.update(action[1])
    return paths


def mark_rereads(records: Iterable[dict[str, Any]], answer: dict[str, Any] | None) -> None:
    """Set each record's `reread` from the exchange's final answer (in place)."""
    paths = _reads(answer) if isinstance(answer, dict) else set()
    for rec in records:
        result = rec.get("result") or ""
        came_from = {p.removeprefix("./") for p in _LABEL_PATH.findall(result)}
        empty = rec.get("outcome") != "ok" and rec.get("outcome") != "truncated"
        rec["reread"] = bool(paths & came_from) or bool(paths and empty)


def reread_share(records: Iterable[dict[str, Any]]) -> float | None:
    """Of the recall calls with a known next step, the share followed by a re-read."""
    known = [r["reread"] for r in records if "reread" in r]
    return sum(known) / len(known) if known else None
