"""JSON Lines read leniently: each readable object with its line number, each unreadable line
reported by number (a transcript cut off mid-write ends in half a line)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson


def objects(path: Path, broken: list[str]) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, object) for each line holding a JSON object; `broken` gets the others."""
    with path.open("rb") as f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                value = orjson.loads(line)
            except orjson.JSONDecodeError as exc:
                cut = "" if line.endswith(b"\n") else " (the file ends mid-line: truncated)"
                broken.append(f"{path.name} line {number}: not JSON{cut}: {exc}")
                continue
            if not isinstance(value, dict):
                broken.append(f"{path.name} line {number}: not a JSON object")
                continue
            yield number, value
