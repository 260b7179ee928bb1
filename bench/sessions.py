"""Long agent sessions through a real ctxproxy: does a 160-turn session keep working?

The session is laid out from real tool runs on this machine (bench/corpus: pytest on a broken
project, Python and Node crashes, gcc, g++ and rustc errors, file reads, grep, git), one step
per turn, some turns with 2-3 parallel tool calls, and a user message that pastes a CI log.
Each turn the client sends the whole history to ctxproxy (a subprocess on a fresh SQLite file),
which forwards to an upstream in this process that counts the prompt as a model server would
(ChatML rendering, cl100k tokens x 1.1, to stand for a tokenizer that is not tiktoken's),
refuses prompts over its window as llama.cpp does, and answers with the session's next step.

Per window and configuration it prints: turns refused by ctxproxy, prompts forwarded over the
window, the share of turns that fired a compaction, token-weighted prefix reuse (the share of
the previous forwarded prompt that the next repeats from its start: what a prefix cache can
reuse), the compile time of turn 10 and turn 150 (in process, from the stored state as the
proxy does), and which evidence strings are in the last forwarded prompt.
"previous default" is the code of commit 0945408 (before stored state and forgetting), run
from `git archive`. Run from the repository root: python -m bench.sessions [--quick] [--llama]
`--llama-only` runs only the real llama.cpp session, once per `--cache-reuse` value (the
server's reuse of cached chunks after a cut; 0 is off), and prints its cached share beside the
append-only limit.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from bench import spawn, tabulate

PREVIOUS = "0945408"
SYSTEM = (
    "You are a coding agent working in a terminal. Use the tools to inspect files and run "
    "commands; make minimal, correct changes; run the tests before you finish."
)
TASK = (
    "Several projects in this workspace fail to build or test. Go through them one by one, "
    "find each cause and fix it without changing the tests."
)
INFLATE = 1.1  # upstream tokens per cl100k token
BIG = 1200  # tokens: an output this long is kept in the session only now and then


# --- the session ----------------------------------------------------------------------------


def build_session(
    turns: int, seed: int = 1, variants: int = 4, kinds: list[str] | None = None
) -> list[dict]:
    """system + task + more than `turns` requests' worth of real steps; the last steps are a
    pytest run and a Python crash, so the newest evidence is of both kinds at any length."""
    from bench.corpus.build import load_corpus
    from strategies.pipeline import request_points

    rnd = random.Random(seed)
    corpus = load_corpus(variants=variants, bfcl=0, kinds=kinds)
    rnd.shuffle(corpus)
    ending = [next(t for t in corpus if t.kind == k) for k in ("pytest", "python")]
    tail = [step for t in ending for step in _steps(t.messages)]
    body = [step for t in corpus if t not in ending for step in _steps(t.messages)]
    # Mostly commands and short reads, a long file now and then: ~760 tokens a turn on
    # average, as in the sessions the issue measured.
    body = [step for step in body if _size(step) <= BIG or rnd.random() < 0.15] or tail
    log = next(out for _, outs in body + tail for out in outs if "FAILED" in out["content"])
    msgs: list[dict] = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": TASK}]
    i, n = 0, 0
    while len(request_points(msgs)) <= turns - len(tail):
        if n == turns // 3:
            paste = "Here is last night's CI log, in case it helps:\n\n" + log["content"] * 2
            msgs.append({"role": "user", "content": paste})
        k = rnd.choice((2, 3)) if rnd.random() < 0.15 else 1
        msgs += _parallel([body[(i + j) % len(body)] for j in range(k)], n)
        i, n = i + k, n + 1
    for step in tail:
        msgs += _parallel([step], n)
        n += 1
    return msgs


def _size(step: tuple[dict, list[dict]]) -> int:
    return sum(len(out["content"]) for out in step[1]) // 4  # about 4 characters a token


def request_turns(session: list[dict], turns: int) -> list[int]:
    """The first `turns` request points: prefix lengths whose next message is the answer."""
    from strategies.pipeline import request_points

    return [p for p in request_points(session) if p < len(session)][:turns]


def _steps(messages: list[dict]) -> list[tuple[dict, list[dict]]]:
    out = []
    for j, m in enumerate(messages):
        if m.get("role") == "assistant" and m.get("tool_calls"):
            results = [r for r in messages[j + 1 :] if r.get("role") == "tool"]
            ids = {tc["id"] for tc in m["tool_calls"]}
            out.append((m, [r for r in results if r["tool_call_id"] in ids]))
    return out


def _parallel(group: list[tuple[dict, list[dict]]], n: int) -> list[dict]:
    calls, results = [], []
    for k, (assistant, outs) in enumerate(group):
        for tc, out in zip(assistant["tool_calls"], outs, strict=False):
            cid = f"call_{n}_{k}"
            calls.append({**tc, "id": cid})
            results.append({**out, "tool_call_id": cid})
    thought = group[0][0].get("content") or None
    return [{"role": "assistant", "content": thought, "tool_calls": calls}, *results]


def evidence(msgs: list[dict]) -> dict[str, str]:
    """The newest failing tests and the newest traceback's exception line and failing frame."""
    found: dict[str, str] = {}
    for m in reversed(msgs):
        text = m.get("content") if m.get("role") == "tool" else None
        if not isinstance(text, str):
            continue
        if "tests" not in found and (names := re.findall(r"^FAILED (\S+)", text, re.M)):
            for k, name in enumerate(names):
                found[f"failing test {k + 1}"] = name
            found["tests"] = ""
        if "exception" not in found and "Traceback (most recent call last)" in text:
            block = text[text.rindex("Traceback (most recent call last)") :].split("\n")
            frames = [line for line in block if line.lstrip().startswith('File "')]
            exc = next(line for line in block[1:] if line and not line.startswith(" "))
            found["exception"], found["failing frame"] = exc, frames[-1].strip()
    found.pop("tests", None)
    return found


# --- the upstream: counts like a model server, answers with the next step ---------------------


def render(messages: list[dict], tools: list | None = None) -> str:
    """The prompt as a chat template lays it out: tool definitions first, as ChatML-style
    templates put them in the system part."""
    parts = [f"<|im_start|>tools\n{json.dumps(tools)}<|im_end|>\n"] if tools else []
    for m in messages:
        content = m.get("content")
        text = content if isinstance(content, str) else json.dumps(content or "")
        calls = json.dumps(m["tool_calls"]) if m.get("tool_calls") else ""
        parts.append(f"<|im_start|>{m.get('role')}\n{text}{calls}<|im_end|>\n")
    return "".join(parts) + "<|im_start|>assistant\n"


@dataclass
class Upstream:
    session: list[dict]
    window: int = 4096
    prompts: list[tuple[str, int, bool]] = field(default_factory=list)  # text, tokens, over

    def app(self) -> Any:
        from starlette.applications import Starlette
        from starlette.requests import Request
        from starlette.responses import JSONResponse
        from starlette.routing import Route

        from proxy.compile.tokens import TokenCounter

        counter = TokenCounter()

        async def chat(request: Request) -> JSONResponse:
            body = await request.json()
            text = render(body["messages"], body.get("tools"))
            tokens = round(counter.text(text) * INFLATE)
            over = tokens > self.window
            self.prompts.append((text, tokens, over))
            if over:
                error = {
                    "code": 400,
                    "type": "exceed_context_size_error",
                    "message": "the request exceeds the available context size",
                    "n_prompt_tokens": tokens,
                    "n_ctx": self.window,
                }
                return JSONResponse({"error": error}, status_code=400)
            answer = self.session[body["bench_turn"]]
            usage = {"prompt_tokens": tokens, "completion_tokens": 20, "total_tokens": tokens + 20}
            choice = {"index": 0, "message": answer, "finish_reason": "tool_calls"}
            return JSONResponse(
                {
                    "id": "x",
                    "object": "chat.completion",
                    "model": "bench",
                    "choices": [choice],
                    "usage": usage,
                }  # fmt: skip
            )

        return Starlette(routes=[Route("/v1/chat/completions", chat, methods=["POST"])])


# --- one run --------------------------------------------------------------------------------


@dataclass
class Run:
    config: str
    window: int
    turns: int = 0
    refused: int = 0
    errors: int = 0
    over: int = 0
    fired: int = 0
    reuse: float = 0.0
    compile_ms: tuple[float, float] | None = None
    kept: dict[str, bool] = field(default_factory=dict)


CONFIGS: dict[str, dict[str, Any]] = {
    "default": {},
    "recall off": {"recall": False},
    "previous default": {"code": PREVIOUS},
    "sliding_window": {"compaction": {"pipeline": ["sliding_window"]}},
}


def run(
    config: str, window: int, session: list[dict], turns: int, code: Path | None, bar: Any
) -> Run:
    from proxy.testing.servers import ServerThread

    upstream = Upstream(session, window)
    out = Run(config, window)
    port = spawn.free_port()  # within BENCH_PORTS when set
    with ServerThread(upstream.app(), port=port) as up, tempfile.TemporaryDirectory() as tmp:
        proxy = _start_proxy(Path(tmp), up.url, window, CONFIGS[config], code)
        try:
            with httpx.Client(base_url=proxy.url, timeout=120) as client:
                for end in request_turns(session, turns):
                    out.turns += 1
                    body = {"model": "bench", "messages": session[:end], "bench_turn": end}
                    r = client.post(
                        "/v1/chat/completions", json=body, headers={"X-Session-Id": "long"}
                    )
                    if r.status_code == 400 and "context_length_exceeded" in r.text:
                        out.refused += 1
                    elif r.status_code != 200:
                        out.errors += 1
                    out.fired += r.headers.get("x-ctxproxy-compaction", "none") != "none"
                    bar.update(1)
        finally:
            proxy.stop()
    out.over = sum(over for _, _, over in upstream.prompts)
    out.reuse = prefix_reuse([text for text, _, _ in upstream.prompts])
    last = upstream.prompts[-1][0] if upstream.prompts else ""
    out.kept = {
        k: v in last for k, v in evidence(session[: request_turns(session, turns)[-1]]).items()
    }
    return out


def _start_proxy(
    wd: Path, upstream: str, window: int, cfg: dict, code: Path | None
) -> spawn.Server:
    config = {
        "database_url": f"sqlite:///{wd / 'ctxproxy.db'}",
        "upstreams": [
            {"name": "up", "kind": "openai", "base_url": upstream + "/v1", "context_window": window}
        ],
        "log_level": "warning",
    }
    for key in ("compaction", "recall"):
        if key in cfg:
            config[key] = cfg[key]
    (wd / "config.yaml").write_text(json.dumps(config))
    port = spawn.free_port()
    root = code or tabulate.ROOT.parent
    argv = [sys.executable, "-m", cli_module(root), "serve", "--config", "config.yaml"]
    env = {"PYTHONPATH": str(root)}
    server = spawn.start("ctxproxy", [*argv, "--port", str(port)], port, "/healthz", wd, env=env)
    if server.error:
        raise RuntimeError(server.error)
    return server


def cli_module(root: Path) -> str:
    """The tree's own command: proxy/cli/commands.py now, proxy/cli.py in older trees (the
    previous default's)."""
    return (
        "proxy.cli.commands" if (root / "proxy" / "cli" / "commands.py").exists() else "proxy.cli"
    )


def prefix_reuse(prompts: list[str]) -> float:
    """Token-weighted: sum of tokens of the common prefix over sum of the previous prompt's."""
    from proxy.compile.tokens import TokenCounter

    counter = TokenCounter()
    same = total = 0
    for prev, nxt in zip(prompts, prompts[1:], strict=False):
        n = _common(prev, nxt)
        same += counter.text(prev[:n])
        total += counter.text(prev)
    return same / total if total else 1.0


def _common(a: str, b: str) -> int:
    n = min(len(a), len(b))
    lo, hi = 0, n
    while lo < hi:  # binary search on the prefix length: str slices compare in C
        mid = (lo + hi + 1) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo


def compile_times(session: list[dict], window: int, at: Iterable[int]) -> tuple[float, ...]:
    """In process, as the route does: each turn from the previous turn's state; the turns in
    `at` timed (median of 5)."""
    from proxy.compile.tokens import TokenCounter
    from proxy.compile.view import compile_request
    from proxy.settings import CompactionSettings

    settings, counter, prior = CompactionSettings(), TokenCounter(), None
    wanted, times = set(at), {}
    for turn, end in enumerate(request_turns(session, max(at)), start=1):
        body = json.loads(json.dumps({"messages": session[:end]}))
        if turn in wanted:
            runs = []
            for _ in range(5):
                again = json.loads(json.dumps(body))
                t0 = time.perf_counter()
                compile_request(again, window=window, settings=settings, counter=counter,
                                prior=prior)  # fmt: skip
                runs.append((time.perf_counter() - t0) * 1000)
            times[turn] = tabulate.median(runs)
        prior = compile_request(
            body, window=window, settings=settings, counter=counter, prior=prior
        ).state
    return tuple(times[t] for t in sorted(wanted))


# --- real llama.cpp -------------------------------------------------------------------------


def llama_run(turns: int = 40, cache_reuse: int = 0) -> dict[str, Any]:
    """40 agent turns through ctxproxy (default configuration) into llama.cpp's 4,096 window,
    the server started with `--cache-reuse cache_reuse` (0: off)."""
    from proxy.testing.llamacpp import LlamaServer, ensure_model

    with LlamaServer(ensure_model(), cache_reuse=cache_reuse) as llama:
        with tempfile.TemporaryDirectory() as tmp:
            rows, failed = _llama_turns(llama.base_url + "/v1", Path(tmp), turns)
    return {"turns": turns, "cache_reuse": cache_reuse, "failed": failed, **llama_shares(rows)}


def _llama_turns(base_url: str, wd: Path, turns: int) -> tuple[list[dict[str, Any]], int]:
    """Each turn's prompt tokens, cached tokens and whether it fired; and the failed count."""
    from proxy.testing.histories import SYSTEM as SYS
    from proxy.testing.histories import TASK as TSK
    from proxy.testing.histories import agent_turn

    config = {
        "database_url": f"sqlite:///{wd / 'ctxproxy.db'}",
        "upstreams": [{"name": "llama", "kind": "llamacpp", "base_url": base_url}],
        "log_level": "warning",
    }
    (wd / "config.yaml").write_text(json.dumps(config))
    port = spawn.free_port()
    argv = [sys.executable, "-m", "proxy.cli.commands", "serve", "--config", "config.yaml"]
    proxy = spawn.start("ctxproxy", [*argv, "--port", str(port)], port, "/healthz", wd,
                    env={"PYTHONPATH": str(tabulate.ROOT.parent)})  # fmt: skip
    rows, failed = [], 0
    try:
        messages = [SYS, TSK]
        with httpx.Client(base_url=proxy.url, timeout=300) as client:
            for turn in range(turns):
                messages += agent_turn(turn)
                r = client.post(
                    "/v1/chat/completions",
                    headers={"X-Session-Id": "llama-40"},
                    json={"model": "smollm2", "messages": messages, "max_tokens": 8,
                          "temperature": 0},
                )  # fmt: skip
                if r.status_code != 200:
                    failed += 1
                    continue
                usage = r.json()["usage"]
                details = usage.get("prompt_tokens_details") or {}
                rows.append({"prompt": usage["prompt_tokens"],
                             "cached": details.get("cached_tokens", 0),
                             "fired": r.headers["x-ctxproxy-compaction"] != "none"})  # fmt: skip
    finally:
        proxy.stop()
    return rows, failed


def llama_shares(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Cached share over turns 2.. and the append-only limit: the share that would be cached
    if every prompt only extended the previous one (each turn's cache at most the previous
    prompt, and never more than this one), and the first as a share of the second."""
    later = rows[1:]
    total = max(sum(x["prompt"] for x in later), 1)
    limit = sum(min(a["prompt"], b["prompt"]) for a, b in zip(rows, later, strict=False)) / total
    share = sum(x["cached"] for x in later) / total
    return {
        "fired_share": sum(x["fired"] for x in rows) / max(len(rows), 1),
        "cached_share": share,
        "append_only_limit": limit,
        "of_limit": share / limit if limit else 0.0,
        "max_prompt": max((x["prompt"] for x in rows), default=0),
        "rows": rows,
    }


# --- main -----------------------------------------------------------------------------------


def previous_code(wd: Path) -> Path | None:
    """The previous default's code, from git; None when this is not a git checkout."""
    dest = wd / "previous"
    dest.mkdir()
    try:
        archive = subprocess.run(
            ["git", "archive", PREVIOUS], cwd=tabulate.ROOT.parent, capture_output=True, check=True
        ).stdout
        subprocess.run(["tar", "-x", "-C", str(dest)], input=archive, check=True)
    except (subprocess.CalledProcessError, FileNotFoundError):
        return None
    return dest


def main(argv: list[str] | None = None) -> dict[str, Any]:
    from tqdm import tqdm

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--turns", type=int, default=160)
    ap.add_argument("--windows", type=int, nargs="+", default=[4096, 8192, 32768])
    ap.add_argument("--configs", nargs="+", default=list(CONFIGS))
    ap.add_argument("--quick", action="store_true", help="40 turns, 4k and 8k, default only")
    ap.add_argument("--llama", action="store_true", help="also the 40-turn real llama.cpp run")
    ap.add_argument("--llama-only", action="store_true", help="only the llama.cpp run")
    ap.add_argument("--cache-reuse", type=int, nargs="+", default=[0, 64],
                    help="llama.cpp --cache-reuse values to run (0: off)")  # fmt: skip
    ap.add_argument("--variants", type=int, default=4, help="runs per coding scenario")
    ap.add_argument("--kinds", default="", help="comma list of coding scenarios (all)")
    ap.add_argument("--out", type=Path, default=tabulate.RESULTS)
    args = ap.parse_args(argv)
    if args.quick:
        args.turns, args.windows, args.configs = 40, [4096, 8192], ["default"]
    if args.llama_only:
        data = {"llama": llama_report(args.cache_reuse)}
        print(f"\nwrote {tabulate.write_json('sessions-llama', data, args.out)}")
        return data
    kinds = [k for k in args.kinds.split(",") if k] or None
    session = build_session(args.turns, variants=args.variants, kinds=kinds)
    last = request_turns(session, args.turns)[-1]
    ev = evidence(session[:last])
    print(f"session: {args.turns} turns, {last} messages at the last; evidence: {ev}")
    results: list[Run] = []
    with tempfile.TemporaryDirectory() as tmp:
        previous = previous_code(Path(tmp)) if "previous default" in args.configs else None
        todo = [(cfg, w) for w in args.windows for cfg in args.configs]
        with tqdm(total=len(todo) * args.turns, desc="turns", file=sys.stderr) as bar:
            for cfg, window in todo:
                code = previous if CONFIGS[cfg].get("code") else None
                if CONFIGS[cfg].get("code") and code is None:
                    continue
                r = run(cfg, window, session, args.turns, code, bar)
                if cfg == "default":
                    r.compile_ms = compile_times(session, window, (10, min(150, args.turns)))
                results.append(r)
    report(results, args.turns)
    data: dict[str, Any] = {"turns": args.turns, "runs": [r.__dict__ for r in results]}
    if args.llama:
        data["llama"] = llama_report(args.cache_reuse)
    print(f"\nwrote {tabulate.write_json('sessions', data, args.out)}")
    return data


def llama_report(reuse_values: list[int]) -> list[dict[str, Any]]:
    """The 40-turn llama.cpp run once per --cache-reuse value, one server at a time."""
    out = []
    for reuse in reuse_values:
        r = llama_run(cache_reuse=reuse)
        out.append(r)
        print(
            f"real llama.cpp (SmolLM2, 4,096 per slot, --cache-reuse {reuse}), {r['turns']} "
            f"agent turns: failed {r['failed']}, fired {r['fired_share']:.0%} of turns, "
            f"cached share {r['cached_share']:.3f}, append-only limit "
            f"{r['append_only_limit']:.3f} (ratio {r['of_limit']:.2f}), "
            f"largest prompt {r['max_prompt']}"
        )
    return out


def report(results: list[Run], turns: int) -> None:
    header = ["window", "configuration", "refused", "over window", "errors", "fired",
              "prefix reuse", "compile ms t10 / t150", "evidence kept"]  # fmt: skip
    rows = []
    for r in results:
        ms = f"{r.compile_ms[0]:.1f} / {r.compile_ms[1]:.1f}" if r.compile_ms else "-"
        kept = f"{sum(r.kept.values())}/{len(r.kept)}"
        rows.append([f"{r.window:,}", r.config, str(r.refused), str(r.over), str(r.errors),
                     f"{r.fired / max(r.turns, 1):.0%}", f"{r.reuse:.3f}", ms, kept])  # fmt: skip
    print(tabulate.table(header, rows))
    for r in results:
        missing = [k for k, ok in r.kept.items() if not ok]
        if missing:
            print(f"  {r.window:,} {r.config}: missing at the last turn: {', '.join(missing)}")


if __name__ == "__main__":
    main()
