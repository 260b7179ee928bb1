"""The importers on files the real CLIs wrote (Claude Code 2.1.197, Codex 0.171.0, each run
through ctxproxy against the scripted coder): the turns and messages ctxproxy received."""

from __future__ import annotations

import json
from pathlib import Path

from proxy.replay import claude, codex
from proxy.replay.sources import reader_of
from proxy.testing.transcripts import differences

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
CLAUDE = FIXTURES / "claude_code_2.1.197_transcript.jsonl"
CODEX = FIXTURES / "codex_0.171.0_rollout.jsonl"


def live(path: Path) -> dict:
    return json.loads(path.with_suffix(".live.json").read_text())


def test_claude_code_transcript_finds_the_requests_and_messages_sent() -> None:
    [session] = claude.read(CLAUDE)
    sent = live(CLAUDE)
    assert len(session.turns) == sent["requests"]
    last = session.turns[-1].body["messages"]
    assert differences(last, sent["last_messages"], system=False) == []
    for turn in session.turns:  # each request's history is a prefix of the last one's
        written = [m for m in turn.body["messages"] if m["role"] != "system"]
        assert differences(written, sent["last_messages"][: len(written)], system=False) == []
    assert not session.broken and not session.skipped
    assert session.lacks and "system prompt" in session.lacks[0]


def test_codex_rollout_finds_the_requests_and_messages_sent_instructions_too() -> None:
    [session] = codex.read(CODEX)
    sent = live(CODEX)
    counts = [len(t.body["messages"]) for t in session.turns]
    assert counts == sent["messages_per_request"]
    # The base instructions the rollout keeps are not quite those sent (0.171 sent a shorter
    # variant): the report says so; every other message, developer ones included, is the same.
    written, received = session.turns[-1].body["messages"], sent["last_messages"]
    assert written[0]["role"] == received[0]["role"] == "system"
    assert differences(written[1:], received[1:], system=True) == []
    assert session.lacks == [codex.LACKS_TOOLS]
    assert any("base instructions" in n for n in session.notes)
    assert not session.broken and not session.skipped


def test_files_are_told_apart_by_what_they_hold() -> None:
    assert reader_of(CLAUDE) is claude.read
    assert reader_of(CODEX) is codex.read


def test_a_truncated_line_is_reported_by_number_and_the_rest_still_read(tmp_path: Path) -> None:
    lines = CLAUDE.read_bytes().splitlines(keepends=True)
    cut = tmp_path / "cut.jsonl"
    cut.write_bytes(b"".join(lines[:-1]) + lines[-1][: len(lines[-1]) // 2])
    [session] = claude.read(cut)
    assert len(session.broken) == 1
    assert f"line {len(lines)}" in session.broken[0] and "truncated" in session.broken[0]
    assert len(session.turns) == live(CLAUDE)["requests"]


def test_a_corrupt_line_in_the_middle_is_reported_not_fatal(tmp_path: Path) -> None:
    lines = CODEX.read_text().splitlines(keepends=True)
    lines.insert(3, "{not json\n")
    bad = tmp_path / "rollout-bad.jsonl"
    bad.write_text("".join(lines))
    [session] = codex.read(bad)
    assert session.broken == [f"{bad.name} line 4: " + session.broken[0].split(": ", 1)[1]]
    assert "truncated" not in session.broken[0]
    assert len(session.turns) == live(CODEX)["requests"]


def test_unknown_entry_types_are_skipped_and_counted(tmp_path: Path) -> None:
    extra = {"type": "brand_new_kind", "sessionId": "s", "uuid": "x", "parentUuid": None}
    path = tmp_path / "t.jsonl"
    path.write_text(CLAUDE.read_text() + json.dumps(extra) + "\n" + json.dumps(extra) + "\n")
    [session] = claude.read(path)
    assert session.skipped == {"brand_new_kind": 2}
    assert len(session.turns) == live(CLAUDE)["requests"]


def entry(kind: str, uuid: str, parent: str | None, content: object, **more: object) -> str:
    role = "assistant" if kind == "assistant" else "user"
    message: dict = {"role": role, "content": content}
    if kind == "assistant":
        message["id"] = more.pop("message_id", "msg_" + uuid)
    line = {"type": kind, "uuid": uuid, "parentUuid": parent, "sessionId": "s", "message": message}
    return json.dumps(line | more)


def test_compact_boundary_starts_a_new_chain_and_sidechains_stay_apart(tmp_path: Path) -> None:
    """Claude Code's own compaction: the requests after it carry its summary, not the turns
    before; a subagent's entries are not the main conversation's."""
    boundary = {"type": "system", "subtype": "compact_boundary", "uuid": "b", "parentUuid": None}
    lines = [
        entry("user", "u1", None, "first task"),
        entry("assistant", "a1", "u1", [{"type": "text", "text": "done"}]),
        entry("user", "s1", "a1", "subagent prompt", isSidechain=True),
        entry("assistant", "s2", "s1", [{"type": "text", "text": "sub"}], isSidechain=True),
        json.dumps(boundary | {"sessionId": "s"}),
        entry("user", "u2", "b", "Summary of the conversation so far", isCompactSummary=True),
        entry("user", "u3", "u2", "next task"),
        entry("assistant", "a2", "u3", [{"type": "text", "text": "part one"}], message_id="m"),
        entry("assistant", "a3", "a2", [{"type": "text", "text": "part two"}], message_id="m"),
    ]
    path = tmp_path / "t.jsonl"
    path.write_text("\n".join(lines) + "\n")
    [session] = claude.read(path)
    assert [t.body["messages"] for t in session.turns] == [
        [{"role": "user", "content": "first task"}],
        [{"role": "user", "content": "Summary of the conversation so far\n\nnext task"}],
    ]
    assert any("compacted its own history" in n for n in session.notes)
    assert any("sidechain" in n for n in session.notes)


def test_codex_reasoning_and_calls_of_one_answer_are_one_turn(tmp_path: Path) -> None:
    def item(payload: dict) -> str:
        return json.dumps({"type": "response_item", "payload": payload})

    user = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "go"}]}
    call = {"type": "function_call", "name": "shell", "arguments": "{}", "call_id": "c1"}
    lines = [
        json.dumps(
            {
                "type": "session_meta",
                "payload": {"id": "r", "base_instructions": {"text": "be brief"}},
            }
        ),
        item(user),
        item({"type": "reasoning", "summary": [], "encrypted_content": "x"}),
        item(call),
        item({"type": "function_call_output", "call_id": "c1", "output": "ok"}),
        item(
            {
                "type": "message",
                "role": "assistant",
                "content": [{"type": "output_text", "text": "done"}],
            }
        ),
    ]
    path = tmp_path / "rollout.jsonl"
    path.write_text("\n".join(lines) + "\n")
    [session] = codex.read(path)
    assert [len(t.body["messages"]) for t in session.turns] == [2, 4]
    assert session.turns[0].body["messages"][0] == {"role": "system", "content": "be brief"}
    assert session.lacks == [codex.LACKS_TOOLS]
