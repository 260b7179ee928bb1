"""A Claude-Code-shaped session through ctxproxy's Messages API: does it fit a 16k window?

The client speaks Anthropic Messages as Claude Code does: a long system prompt (this repo's own
documentation, cut to --system-tokens cl100k tokens), 20 tool definitions with Claude Code's
tool names, and 100 tool-use turns of real outputs (bench/sessions.py's session: pytest,
crashes, compiler errors, file reads, grep, git), each turn the whole history, max_tokens
32,000. ctxproxy (in process, fresh SQLite) forwards to an upstream in this process that counts
the prompt as a model server would (cl100k x 1.1, tools included), refuses prompts over its
window as llama.cpp does, and answers with the session's next step; `translated` serves chat
completions only, `native` serves /v1/messages too and gets every view natively (recall off),
`native+recall` (the default) natively until the view is folded, then translated with the
recall tool.

On every fifth request that offers ctxproxy_recall, the upstream calls it for the newest
placeholder's original, as a model might. Per run it prints: turns refused by ctxproxy, prompts
forwarded over the window, the share of turns that fired a compaction, token-weighted prefix
reuse between consecutive forwarded prompts, requests that offered recall, recall results that
brought no text back ("no room"), and which of the newest evidence strings are in the last
forwarded prompt.
Run from the repository root: python -m bench.claude_code [--quick]
"""

from __future__ import annotations

import argparse
import json
import re
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from bench import sessions as s
from bench import tabulate
from proxy.testing import histories

TOOL_NAMES = [
    "Task", "Bash", "Glob", "Grep", "LS", "ExitPlanMode", "Read", "Edit", "MultiEdit", "Write",
    "NotebookRead", "NotebookEdit", "WebFetch", "TodoWrite", "WebSearch", "BashOutput",
    "KillShell", "SlashCommand", "ListMcpResources", "ReadMcpResource",
]  # fmt: skip
RECALL_EVERY = 5  # the scripted model recalls on every fifth request offering the tool
DOCS = ["README.md", "bench/README.md", "tests/llama/LLAMACPP_NOTES.md"]


def system_prompt(tokens: int) -> str:
    from proxy.compile.tokens import TokenCounter

    text = "\n\n".join((tabulate.ROOT.parent / p).read_text() for p in DOCS)
    while TokenCounter().text(text) < tokens:
        text += "\n\n" + text
    enc = TokenCounter()._enc
    return enc.decode(enc.encode_ordinary(text)[:tokens])


def tools() -> list[dict[str, Any]]:
    doc = (tabulate.ROOT.parent / "README.md").read_text().split("\n\n")
    out = []
    for i, name in enumerate(TOOL_NAMES):
        props = {
            f"arg{k}": {"type": "string", "description": doc[(i * 3 + k) % len(doc)][:120]}
            for k in range(3)
        }
        out.append(
            {
                "name": name,
                "description": " ".join(doc[(i * 7 + k) % len(doc)] for k in range(3))[:400],
                "input_schema": {"type": "object", "properties": props, "required": ["arg0"]},
            }
        )
    return out


def to_anthropic(messages: list[dict]) -> list[dict]:
    """The neutral session (after its system message) as Claude Code would send it."""
    from proxy.formats import anthropic

    out: list[dict] = []
    for m in messages:
        if m["role"] == "assistant":
            out.append({"role": "assistant", "content": anthropic.answer_blocks(m)})
        elif m["role"] == "tool":
            block = {
                "type": "tool_result",
                "tool_use_id": m["tool_call_id"],
                "content": m["content"],
            }
            if out and out[-1]["role"] == "user" and isinstance(out[-1]["content"], list):
                out[-1]["content"].append(block)
            else:
                out.append({"role": "user", "content": [block]})
        else:
            out.append({"role": "user", "content": m["content"]})
    return out


@dataclass
class Upstream:
    """Counts like a model server (cl100k x 1.1, tools included), answers the next step."""

    session: list[dict]
    window: int
    answers: dict[tuple[str | None, str], int]  # a request's _key -> its answer's index
    prompts: list[tuple[str, bool]] = field(default_factory=list)
    tokens: int = 0  # the last prompt's count
    offered: int = 0  # requests that carried the recall tool
    recalls: list[str] = field(default_factory=list)  # the recall results it was given

    def app(self) -> Any:
        from starlette.applications import Starlette
        from starlette.requests import Request
        from starlette.responses import JSONResponse
        from starlette.routing import Route

        from proxy.compile.tokens import TokenCounter
        from proxy.formats import anthropic

        counter = TokenCounter()

        def refused(text: str) -> JSONResponse | None:
            tokens = round(counter.text(text) * s.INFLATE)
            self.prompts.append((text, tokens > self.window))
            self.tokens = tokens
            if tokens <= self.window:
                return None
            err = {
                "code": 400,
                "type": "exceed_context_size_error",
                "n_ctx": self.window,
                "n_prompt_tokens": tokens,
                "message": "the request exceeds the available context size",
            }
            return JSONResponse({"error": err}, status_code=400)

        async def chat(request: Request) -> JSONResponse:
            body = await request.json()
            text = json.dumps(body.get("tools")) + s.render(body["messages"])
            if (no := refused(text)) is not None:
                return no
            own = [m for m in body["messages"] if not _recall_round(m)]
            answer = self.recall(body, text) or self.session[self.answers[_key(own)]]
            choice = {"index": 0, "message": answer, "finish_reason": "tool_calls"}
            usage = {"prompt_tokens": self.tokens, "completion_tokens": 1}
            return JSONResponse({"object": "chat.completion", "choices": [choice], "usage": usage})

        async def messages(request: Request) -> JSONResponse:
            body = await request.json()
            text = json.dumps(body.get("tools")) + _render_anthropic(body)
            if (no := refused(text)) is not None:
                return no
            neutral = [n for m in body["messages"] for n in anthropic.message_to_neutral(m)]
            answer = self.session[self.answers[_key(neutral)]]
            usage = {"input_tokens": self.tokens, "output_tokens": 1}
            blocks = anthropic.answer_blocks(answer)
            return JSONResponse({"type": "message", "role": "assistant", "content": blocks,
                                 "stop_reason": "tool_use", "usage": usage})  # fmt: skip

        return Starlette(
            routes=[
                Route("/v1/chat/completions", chat, methods=["POST"]),
                Route("/v1/messages", messages, methods=["POST"]),
            ]
        )

    def recall(self, body: dict, text: str) -> dict | None:
        """As a model might: on every RECALL_EVERY-th request that offers ctxproxy_recall, ask
        for the newest folded original once; the result it gets back is kept."""
        names = [(t.get("function") or {}).get("name") for t in body.get("tools") or []]
        if "ctxproxy_recall" not in names:
            return None
        last = body["messages"][-1]
        if str(last.get("tool_call_id", "")).startswith("recall_"):
            self.recalls.append(str(last.get("content")))
            return None
        self.offered += 1
        refs = re.findall(r"ctxproxy_recall original: (/messages/[0-9a-f]+)", text)
        if self.offered % RECALL_EVERY or not refs:
            return None
        fn = {"name": "ctxproxy_recall", "arguments": json.dumps({"ref": refs[-1]})}
        call = {"id": f"recall_{self.offered}", "type": "function", "function": fn}
        return {"role": "assistant", "content": None, "tool_calls": [call]}


def _recall_round(m: dict) -> bool:
    calls = m.get("tool_calls") or []
    ids = [str(c.get("id", "")) for c in calls] + [str(m.get("tool_call_id", ""))]
    return any(i.startswith("recall_") for i in ids)


def without_text(result: str) -> bool:
    """A recall result that brought nothing back for lack of room."""
    return "no room" in result[:120]


def _key(messages: list[dict]) -> tuple[str | None, str]:
    """What names a turn whatever compaction did: the newest tool result's id and the last
    message's role (a turn ends in tool results or in a user message)."""
    ids = [m["tool_call_id"] for m in messages if m.get("role") == "tool"]
    return (ids[-1] if ids else None, messages[-1]["role"])


def _render_anthropic(body: dict) -> str:
    """A chat template's rendering: the text and tool calls, not the JSON around them."""
    parts = [f"<|im_start|>system\n{body.get('system', '')}<|im_end|>\n"]
    for m in body["messages"]:
        blocks = (
            m["content"]
            if isinstance(m["content"], list)
            else [{"type": "text", "text": m["content"]}]
        )
        text = "".join(_block_text(b) for b in blocks)
        parts.append(f"<|im_start|>{m['role']}\n{text}<|im_end|>\n")
    return "".join(parts) + "<|im_start|>assistant\n"


def _block_text(block: dict) -> str:
    if block["type"] == "tool_use":
        return json.dumps(block.get("input"))
    content = block.get("text") or block.get("content") or ""
    return content if isinstance(content, str) else json.dumps(content)


@dataclass
class Result:
    mode: str
    window: int
    system_tokens: int
    turns: int = 0
    refused: int = 0
    errors: int = 0
    over: int = 0
    fired: int = 0
    reuse: float = 0.0
    offered: int = 0
    recalls: int = 0
    empty_recalls: int = 0
    kept: dict[str, bool] = field(default_factory=dict)
    error_samples: list[str] = field(default_factory=list)


def run(mode: str, window: int, system_tokens: int, session: list[dict], turns: int) -> Result:
    from proxy.app import create_app
    from proxy.settings import Settings
    from proxy.testing.servers import ServerThread

    ends = s.request_turns(session, turns)
    answers = {_key(session[:end]): end for end in ends}
    upstream = Upstream(session, window, answers)
    out = Result(mode, window, system_tokens)
    request = {
        "model": "claude-sonnet-4-5",
        "max_tokens": 32000,
        "system": system_prompt(system_tokens),
        "tools": tools(),
        "metadata": {"user_id": "user_bench_account__session_1"},
    }
    # native: the upstream serves /v1/messages and the view always goes there (recall off
    # there); native+recall, the default: native until the view is folded, then translated
    # so that ctxproxy_recall can be offered.
    apis = ["chat", "messages"] if mode.startswith("native") else ["chat"]
    recall = {"translate": mode != "native"}
    with ServerThread(upstream.app()) as up, tempfile.TemporaryDirectory() as tmp:
        settings = Settings(
            database_url=f"sqlite:///{Path(tmp) / 'ctxproxy.db'}",
            upstreams=[
                {"name": "up", "base_url": up.url + "/v1", "context_window": window, "apis": apis}
            ],  # fmt: skip
            log_level="warning",
            recall=recall,
        )
        with ServerThread(create_app(settings)) as proxy, httpx.Client(timeout=120) as client:
            for end in ends:
                out.turns += 1
                body = {**request, "messages": to_anthropic(session[1:end])}
                r = client.post(proxy.url + "/v1/messages", json=body)
                if r.status_code == 400 and "prompt is too long" in r.text:
                    out.refused += 1
                elif r.status_code != 200:
                    out.errors += 1
                    out.error_samples.append(f"{r.status_code} {r.text[:300]}")
                out.fired += r.headers.get("x-ctxproxy-compaction", "none") != "none"
    sent = [text for text, over in upstream.prompts if not over]
    out.over = sum(over for _, over in upstream.prompts)  # each one refitted and resent
    out.reuse = s.prefix_reuse(sent)
    out.offered, out.recalls = upstream.offered, len(upstream.recalls)
    out.empty_recalls = sum(without_text(r) for r in upstream.recalls)
    last = sent[-1] if sent else ""
    out.kept = {k: v in last for k, v in s.evidence(session[: ends[-1]]).items()}
    return out


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--turns", type=int, default=100)
    ap.add_argument("--runs", default="15000:16384,4000:16384,15000:32768,15000:65536",
                    help="system-prompt tokens:window pairs")  # fmt: skip
    ap.add_argument("--modes", nargs="+", default=["translated", "native", "native+recall"])
    ap.add_argument("--quick", action="store_true", help="20 turns, one 16k run per mode")
    ap.add_argument("--out", type=Path, default=tabulate.RESULTS)
    args = ap.parse_args(argv)
    if args.quick:
        args.turns, args.runs = 20, "4000:16384"
    session = s.build_session(args.turns)
    schemas = histories.count_tokens([{"role": "system", "content": json.dumps(tools())}])
    print(f"{len(tools())} tools, {schemas:,} tokens; {args.turns} turns")
    results = []
    for pair in args.runs.split(","):
        sys_tokens, window = (int(x) for x in pair.split(":"))
        for mode in args.modes:
            results.append(run(mode, window, sys_tokens, session, args.turns))
            print(results[-1])
    report(results)
    data = {"turns": args.turns, "runs": [r.__dict__ for r in results]}
    print(f"\nwrote {tabulate.write_json('claude_code', data, args.out)}")
    return data


def report(results: list[Result]) -> None:
    header = ["system tokens", "window", "forwarding", "turns", "refused", "over window",
              "errors", "fired", "prefix reuse", "recall offered", "recalls without text",
              "newest evidence kept"]  # fmt: skip
    rows = [
        [f"{r.system_tokens:,}", f"{r.window:,}", r.mode, str(r.turns), str(r.refused),
         str(r.over), str(r.errors), f"{r.fired / max(r.turns, 1):.0%}", f"{r.reuse:.3f}",
         str(r.offered), f"{r.empty_recalls}/{r.recalls}",
         f"{sum(r.kept.values())}/{len(r.kept)}"]
        for r in results
    ]  # fmt: skip
    print(tabulate.table(header, rows))
    for r in results:
        for sample in r.error_samples:
            print(f"  {r.system_tokens:,}/{r.window:,} {r.mode}: {sample}")


if __name__ == "__main__":
    main()
