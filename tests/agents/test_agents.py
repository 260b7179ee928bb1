"""The real agent CLIs, pinned, driven headless through ctxproxy against a scripted coding upstream.

Each test runs a CLI on a scratch repo whose one test fails; the upstream
(proxy/testing/coder.py) plays a coding agent with the CLI's own tools until pytest passes.
What a user would check: the CLI exits 0, the repo's tests pass, the run is one session in the
audit, a continuation joins it, no exchange failed, every view sent upstream is valid, and
`ctxproxy_recall` never reaches the CLI. Claude Code's and Codex's sessions then replay offline
(`ctxproxy replay`): the stored one to the views sent live, the transcript the CLI wrote in its
scratch HOME to the same requests and messages.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from proxy.replay import claude as claude_transcript
from proxy.replay import codex as codex_rollout
from proxy.testing.coder import RECALL
from strategies.invariants import pairing_faults
from tests.agents import clis
from tests.agents.replayed import check_replay
from tests.agents.repo import repo_tests_pass

pytestmark = pytest.mark.agents
LOCAL_MODEL = "qwen2.5-coder-7b-instruct"


@dataclass
class Audit:
    sessions: list[dict[str, Any]]
    exchanges: list[dict[str, Any]]
    compiled: list[list[dict[str, Any]]]  # each exchange's compiled messages


def audit(proxy: str) -> Audit:
    sessions = httpx.get(f"{proxy}/sessions", params={"limit": 100}).json()["data"]
    exchanges, compiled = [], []
    for s in sessions:
        page = httpx.get(f"{proxy}/sessions/{s['id']}/exchanges").json()["data"]
        exchanges += page
        for x in page:
            detail = httpx.get(f"{proxy}/sessions/{s['id']}/exchanges/{x['seq']}").json()
            compiled.append((detail.get("compiled_request") or {}).get("messages") or [])
    return Audit(sessions, exchanges, compiled)


def drive(agent: clis.Agent, scene: clis.Scene, record: list[dict[str, Any]], label: str) -> Audit:
    """Run the task and its continuation; CTXPROXY_AGENTS_DUMP=dir keeps what the upstream got."""
    try:
        return _drive(agent, scene, record, label)
    finally:
        if dump := os.environ.get("CTXPROXY_AGENTS_DUMP"):
            name = re.sub(r"[^\w.-]+", "_", label)
            Path(dump, f"{name}.json").write_text(json.dumps(scene.coder.received, indent=1))


def _drive(agent: clis.Agent, scene: clis.Scene, record: list[dict[str, Any]], label: str) -> Audit:
    """Run the task, check it as a user would, run the continuation, check again."""
    agent.prepare()
    ran = clis.run(agent, agent.first, scene.repo)
    first = audit(scene.proxy)
    said = cli_errors(ran.out)
    assert first.exchanges, f"{label}: no request recorded; the CLI said {said or ran.err[-2000:]}"
    refused = [x for x in first.exchanges if x["status"] != 200]
    assert not refused, f"{label}: refused requests {_refusals(scene.proxy, first)}"
    assert ran.code == 0, f"{label}: exit {ran.code}\n{ran.out[-2000:]}\n{ran.err[-2000:]}"
    assert not said, f"{label}: the CLI reported errors {said}"
    passed, report = repo_tests_pass(scene.repo)
    assert passed, f"{label}: the scratch repo's tests still fail\n{report}"
    check_audit(first, label)
    check_no_recall(scene, ran.out, label)
    turns, seconds = len(scene.coder.received), ran.seconds
    if agent.again is not None:
        again = clis.run(agent, agent.again, scene.repo)
        assert again.code == 0, f"{label} continued: exit {again.code}\n{again.err[-2000:]}"
        assert not cli_errors(again.out), f"{label} continued: {cli_errors(again.out)}"
        after = audit(scene.proxy)
        check_audit(after, label + " continued")
        assert len(after.exchanges) > len(first.exchanges), "the continuation sent nothing"
        check_no_recall(scene, again.out, label + " continued")
        seconds += again.seconds
        first = after
    record.append(
        {
            "cli": label,
            "turns": turns,
            "requests": len(scene.coder.received),
            "exchanges": len(first.exchanges),
            "compactions": sum(1 for x in first.exchanges if x["phases"]),
            "recalls": sum(1 for m in scene.coder.answered if _calls(m, RECALL)),
            # Titles, summaries: what the CLI asked besides the task (its own compaction).
            "toolless": sum(1 for body in scene.coder.received if not body.get("tools")),
            "seconds": round(seconds, 1),
        }
    )
    return first


def cli_errors(output: str) -> list[str]:
    """Errors a CLI reported in its JSON events (Claude Code exits 0 after an API error)."""
    found = []
    for line in output.splitlines():
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if isinstance(event, dict) and (
            event.get("is_error") is True or event.get("type") in ("error", "turn.failed")
        ):
            found.append(line[:600])
    return found


def check_audit(found: Audit, label: str) -> None:
    titles = [s.get("title") for s in found.sessions]
    assert len(found.sessions) == 1, f"{label}: {len(found.sessions)} sessions: {titles}"
    errors = [x for x in found.exchanges if x["status"] != 200 or x["error_code"]]
    assert not errors, f"{label}: error exchanges {errors}"
    for x, messages in zip(found.exchanges, found.compiled, strict=True):
        faults = [f.describe() for f in pairing_faults(messages)]
        assert not faults, f"{label}: exchange {x['seq']} sent an invalid view: {faults}"


def check_no_recall(scene: clis.Scene, output: str, label: str) -> None:
    """Whatever the upstream asked of ctxproxy_recall, the CLI saw none of it."""
    assert RECALL not in output, f"{label}: ctxproxy_recall reached the CLI"
    for body in scene.coder.received:
        for message in body.get("messages") or []:
            for call in message.get("tool_calls") or []:
                # A recall call may come back only in the proxy's own round, right after it.
                if call["function"]["name"] == RECALL:
                    assert message is body["messages"][-2], f"{label}: recall in the history"


def _calls(message: dict[str, Any], name: str) -> bool:
    return any(c["function"]["name"] == name for c in message.get("tool_calls") or [])


def _refusals(proxy: str, found: Audit) -> list[str]:
    out = []
    for s in found.sessions:
        for x in httpx.get(f"{proxy}/sessions/{s['id']}/exchanges").json()["data"]:
            if x["status"] != 200:
                detail = httpx.get(f"{proxy}/sessions/{s['id']}/exchanges/{x['seq']}").json()
                out.append(f"#{x['seq']} {x['status']}: {str(detail.get('error'))[:600]}")
    return out


@pytest.mark.parametrize("model", [None, "claude-sonnet-4-5", LOCAL_MODEL])
def test_claude_code(
    model: str | None, scene: clis.Scene, ctxproxy: Any, npm_bin: Path, record: list[dict[str, Any]]
) -> None:
    """Claude Code at 32k with its shipped defaults: its default model, a Claude name it sends
    no mid-conversation system message for, and a local model name."""
    agent = clis.claude(npm_bin, scene.home, ctxproxy(32768), model)
    drive(agent, scene, record, f"claude-code ({model or 'default model'}) 32k")
    check_replay(scene, ".claude/projects/*/*.jsonl", claude_transcript.read)


def test_codex(
    scene: clis.Scene, ctxproxy: Any, npm_bin: Path, record: list[dict[str, Any]]
) -> None:
    agent = clis.codex(npm_bin, scene.home, ctxproxy(32768), LOCAL_MODEL)
    drive(agent, scene, record, "codex 32k")
    check_replay(scene, ".codex/sessions/*/*/*/rollout-*.jsonl", codex_rollout.read, skip=1)


def test_opencode_compacted_by_ctxproxy(
    scene: clis.Scene, ctxproxy: Any, npm_bin: Path, record: list[dict[str, Any]]
) -> None:
    """opencode at 16k with its own compaction off: ctxproxy compacts, and answers recall."""
    agent = clis.opencode(npm_bin, scene.home, ctxproxy(16384), LOCAL_MODEL, 16384, False)
    found = drive(agent, scene, record, "opencode 16k, own compaction off")
    assert any(x["phases"] for x in found.exchanges), "compaction never fired at 16k"
    assert any(_calls(m, RECALL) for m in scene.coder.answered), "recall was never offered"


def test_opencode_with_its_own_compaction(
    scene: clis.Scene, ctxproxy: Any, npm_bin: Path, record: list[dict[str, Any]]
) -> None:
    """opencode with its own compaction on, told of a smaller window than ctxproxy's 16k so
    that its compaction fires: its summary requests stay in the session."""
    agent = clis.opencode(npm_bin, scene.home, ctxproxy(16384), LOCAL_MODEL, 12288, True)
    drive(agent, scene, record, "opencode 16k, own compaction on")


@pytest.mark.parametrize("max_output", [None, 4096])
def test_qwen_code(
    max_output: int | None,
    scene: clis.Scene,
    ctxproxy: Any,
    npm_bin: Path,
    record: list[dict[str, Any]],
) -> None:
    """Qwen Code at 32k with its default settings (it asks max_tokens 32000 of a model it does
    not know), and with its own output limit set as its docs say."""
    agent = clis.qwen(npm_bin, scene.home, ctxproxy(32768), LOCAL_MODEL, max_output)
    drive(agent, scene, record, f"qwen-code 32k, max output {max_output or 'default'}")


def test_aider(
    scene: clis.Scene, ctxproxy: Any, aider_bin: Path, record: list[dict[str, Any]]
) -> None:
    """aider at 8k: no tools, a SEARCH/REPLACE block, its own test command; side requests too."""
    files = [str(scene.repo / p) for p in scene.coder.sources[:1]] + ["tests/test_arith.py"]
    agent = clis.aider(aider_bin, scene.home, ctxproxy(8192), LOCAL_MODEL, files)
    drive(agent, scene, record, "aider 8k")
