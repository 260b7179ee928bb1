"""Which parts of a compiled view are the client's own items, untouched, and which are new.

A converter turns each of the client's items (an Anthropic message, a run of Responses
items) into neutral messages and remembers the pair as a Group. After compaction, a run of
the view equal to a group's neutral messages goes out as the client's raw items, byte for byte
(signatures, cache_control, unknown fields); anything compaction changed is rebuilt."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Group:
    raw: list[Any] = field(default_factory=list)  # the client's items, as they came
    neutral: list[dict[str, Any]] = field(default_factory=list)  # what they became


@dataclass
class Conversion:
    """A request in neutral form, with what is needed to send it back natively."""

    body: dict[str, Any]  # the neutral (OpenAI chat) request
    raw: dict[str, Any]  # the client's request as it came
    groups: list[Group]
    head: dict[str, Any] | None = None  # the neutral system message made of system/instructions
    answer_id: str = ""  # the id the answer gets, when the API's ids are ctxproxy's own
    # Bytes of it that no earlier request sent (formats/seen.py); None: not known.
    unseen: int | None = None


def restore(
    view: list[dict[str, Any]], groups: list[Group], rebuild: Callable[[dict[str, Any]], list]
) -> list[Any]:
    """The view as the client's own items where untouched, rebuilt items elsewhere."""
    out: list[Any] = []
    g = j = 0
    while j < len(view):
        hit = _find(view, j, groups, g)
        if hit is None:
            out.extend(rebuild(view[j]))
            j += 1
            continue
        out.extend(groups[hit].raw)
        j += len(groups[hit].neutral)
        g = hit + 1
    return out


def _find(view: list[dict[str, Any]], j: int, groups: list[Group], start: int) -> int | None:
    for i in range(start, len(groups)):
        neutral = groups[i].neutral
        if neutral and view[j] == neutral[0] and view[j : j + len(neutral)] == neutral:
            return i
    return None


def split_head(
    view: list[dict[str, Any]], conversion: Conversion
) -> tuple[dict[str, Any] | None, list[dict[str, Any]]]:
    """The view's leading system message (from system/instructions) and the rest."""
    if conversion.head is not None and view and view[0].get("role") == "system":
        return view[0], view[1:]
    return None, view


def text_of(content: Any) -> str:
    """Plain text of a neutral content: a string, or the text of its parts."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(p.get("text", "") for p in content if isinstance(p, dict))
    return ""
