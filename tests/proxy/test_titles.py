"""Session titles: the first words a person wrote, past what agent harnesses put first."""

from __future__ import annotations

from proxy.titles import person_text, title
from proxy.wire import anthropic, responses
from tests.proxy.test_wire import fixture


def _user_contents(messages: list[dict]) -> list:
    return [m["content"] for m in messages if m["role"] == "user"]


def test_claude_code_title_is_the_task_after_its_system_reminder() -> None:
    conv = anthropic.to_neutral(fixture("claude_code_2.1.197_first_request.json"))
    assert title(_user_contents(conv.body["messages"])) == "Fix the bug in calc.py so add works"


def test_codex_title_skips_its_environment_context_message() -> None:
    conv = responses.to_neutral(fixture("codex_0.171.0_first_request.json"))
    assert title(_user_contents(conv.body["messages"])) == "Fix the bug in calc.py so add works"


def test_wrappers_skipped_in_any_number_then_the_task() -> None:
    agents = "# AGENTS.md instructions for /repo\n\n<INSTRUCTIONS>\nUse tabs.\n</INSTRUCTIONS>"
    text = (
        "<system-reminder>\nContents of /repo/CLAUDE.md: be kind\n</system-reminder>\n"
        '<user_instructions x="1">\nno\n</user_instructions>\n\n  Rename   foo to bar'
    )
    assert person_text(text) == "Rename   foo to bar"
    assert title([agents, [{"type": "text", "text": text}]]) == "Rename foo to bar"


def test_a_person_writing_markup_keeps_it() -> None:
    """Only whole wrapped blocks are skipped: a message that merely starts with a tag, or is
    only markup, still names the session."""
    assert title(["<div> is broken on the home page"]) == "<div> is broken on the home page"
    assert title(["a < b > c"]) == "a < b > c"
    only = "<environment_context>\n  <cwd>/r</cwd>\n</environment_context>"
    assert title([only]) == "<environment_context> <cwd>/r</cwd> </environment_context>"
    assert title([]) == ""
