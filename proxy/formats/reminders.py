"""Mid-conversation system messages, folded into a user turn for upstreams that refuse them.

Claude Code (`role: "system"` inside `messages`) and Codex (`developer` items anywhere in its
input) speak to the model between turns. Many chat templates (llama.cpp's, vLLM's for Qwen,
Llama, Gemma…) raise on a system message that is not the first, so such a message goes out as a
marked reminder inside the adjacent user turn (or tool result): carried, never dropped."""

from __future__ import annotations

from typing import Any

from proxy.formats.groups import text_of

PROMPT = ("system", "developer")
OPEN, CLOSE = "<system-reminder>\n", "\n</system-reminder>"


def has_mid_system(messages: list[dict[str, Any]]) -> bool:
    """Whether a system/developer message follows a message of another role."""
    seen_other = False
    for m in messages:
        if m.get("role") in PROMPT:
            if seen_other:
                return True
        else:
            seen_other = True
    return False


def fold(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One leading system message, and every later one carried in its neighbour turn.

    Returns a new list; the input (the stored view) is never changed."""
    lead = 0
    while lead < len(messages) and messages[lead].get("role") in PROMPT:
        lead += 1
    if lead <= 1 and not has_mid_system(messages):
        return messages
    out: list[dict[str, Any]] = []
    if lead:
        joined = "\n\n".join(text_of(m.get("content")) for m in messages[:lead])
        out.append({"role": "system", "content": joined})
    pending: list[str] = []  # reminders waiting for the next user turn
    for m in messages[lead:]:
        if m.get("role") in PROMPT:
            pending.append(text_of(m.get("content")))
            continue
        if pending and m.get("role") == "user":
            m = _with_reminders(m, pending)
            pending = []
        elif pending and m.get("role") == "tool" and out and _awaits_results(out[-1]):
            pass  # a call's results follow it at once: the reminders wait until they are in
        elif pending:
            _flush(out, pending)
            pending = []
        out.append(m)
    if pending:
        _flush(out, pending)
    return out


def _awaits_results(msg: dict[str, Any]) -> bool:
    return msg.get("role") == "tool" or bool(
        msg.get("role") == "assistant" and msg.get("tool_calls")
    )


def _flush(out: list[dict[str, Any]], pending: list[str]) -> None:
    """Reminders with no user turn right after them: onto the turn before, if it is a user's or
    a tool result, else a user turn of their own where they stood."""
    if out and out[-1].get("role") in ("user", "tool"):
        out[-1] = _with_reminders(out[-1], pending, after=True)
    else:
        out.append({"role": "user", "content": _wrapped(pending)})


def _wrapped(reminders: list[str]) -> str:
    return "\n\n".join(OPEN + r + CLOSE for r in reminders)


def _with_reminders(
    msg: dict[str, Any], reminders: list[str], after: bool = False
) -> dict[str, Any]:
    note = _wrapped(reminders)
    content = msg.get("content")
    if isinstance(content, list):
        part = {"type": "text", "text": note}
        content = [*content, part] if after else [part, *content]
    else:
        text = text_of(content)
        content = f"{text}\n\n{note}" if after else f"{note}\n\n{text}"
    return {**msg, "content": content}
