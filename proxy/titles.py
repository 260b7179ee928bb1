"""A session's title: the first words a person wrote, past the wrappers agent harnesses add.

Claude Code opens its first user turn with `<system-reminder>` blocks (dates, CLAUDE.md, the agent
types); Codex sends `<environment_context>`, `<user_instructions>` and an AGENTS.md dump as user
messages of their own before the task. Those are skipped: leading tag-wrapped blocks and
instruction-file dumps; what follows them is the task."""

from __future__ import annotations

from typing import Any

TITLE_CHARS = 80
# Codex's AGENTS.md dump: "# AGENTS.md instructions for <dir>" then an <INSTRUCTIONS> block.
_DUMP_HEADS = ("# AGENTS.md instructions", "# CLAUDE.md", "# AGENTS.md")
_DUMP_END = "</INSTRUCTIONS>"


def text_of(content: Any) -> str:
    if isinstance(content, list):  # content parts: the text ones
        return "\n".join(
            str(p.get("text", "")) for p in content if isinstance(p, dict) and "text" in p
        )
    return str(content or "")


def person_text(content: Any) -> str:
    """The message's text without the harness's leading wrappers ("" if it is all wrapper)."""
    text = text_of(content).lstrip()
    while text:
        rest = _after_wrapper(text)
        if rest is None:
            break
        text = rest.lstrip()
    return text


def _after_wrapper(text: str) -> str | None:
    """The text after one leading wrapper, or None if it does not start with one."""
    if text.startswith(_DUMP_HEADS):
        end = text.find(_DUMP_END)
        return "" if end < 0 else text[end + len(_DUMP_END) :]
    tag = _opening_tag(text)
    if tag is None:
        return None
    end = text.find(f"</{tag}>")
    return None if end < 0 else text[end + len(tag) + 3 :]


def _opening_tag(text: str) -> str | None:
    """The name of a `<name ...>` tag opening the text (plain scanning: linear in its length)."""
    if not text.startswith("<"):
        return None
    close = text.find(">", 1, 200)
    if close < 0:
        return None
    name = text[1:close].split(None, 1)[0] if text[1:close].strip() else ""
    ok = name[:1].isalpha() and all(c.isalnum() or c in "_-.:" for c in name)
    return name if ok else None


def shorten(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= TITLE_CHARS else text[: TITLE_CHARS - 1].rstrip() + "…"


def title(contents: list[Any]) -> str:
    """The title of a session whose first user messages had these contents, in order: the first
    one with words of a person's own; failing that, the first one as it is."""
    for content in contents:
        if words := person_text(content).strip():
            return shorten(words)
    return shorten(text_of(contents[0])) if contents else ""
