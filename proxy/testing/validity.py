"""Whether a view is a valid chat completion request, judged apart from the proxy's own checks."""

from __future__ import annotations

ROLES = {"system", "developer", "user", "assistant", "tool"}


def problems(view: list[dict] | None) -> list[str]:
    """Why a view is not a valid chat completion request (empty list: it is valid)."""
    if not view:
        return ["no messages"]
    found = [f"bad role {m.get('role')!r}" for m in view if m.get("role") not in ROLES]
    for m in view:
        content = m.get("content")
        if content is None and not (m.get("role") == "assistant" and m.get("tool_calls")):
            found.append(f"{m.get('role')} message without content")
        elif content is not None and not isinstance(content, str | list):
            found.append(f"{m.get('role')} content of type {type(content).__name__}")
    i = 0
    while i < len(view):
        calls = view[i].get("tool_calls") or [] if view[i].get("role") == "assistant" else []
        ids = {c.get("id") for c in calls}
        if view[i].get("role") == "tool":
            found.append(f"tool message {view[i].get('tool_call_id')!r} answers no call")
        i += 1
        answered = set()
        while ids and i < len(view) and view[i].get("role") == "tool":
            tid = view[i].get("tool_call_id")
            found += [] if tid in ids else [f"tool message {tid!r} answers no call"]
            answered.add(tid)
            i += 1
        found += [f"tool call {t!r} unanswered" for t in ids - answered]
    if not any(m.get("role") == "user" for m in view):
        found.append("no user message")
    if view[-1].get("role") not in ("user", "tool"):
        found.append(f"ends with {view[-1].get('role')}")
    return found
