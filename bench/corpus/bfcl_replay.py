"""Replay BFCL multi-turn tasks into OpenAI histories; runs inside the venv that has bfcl-eval.

Each task's ground-truth calls are executed turn by turn with BFCL's own simulated tools
(file system, trading bot, ticket and message APIs …), so every tool message holds what the
tool really returned. The history ends with the last turn's user message: its evidence is that
request plus the argument values of the next calls that only earlier turns revealed.
Usage: python bfcl_replay.py COUNT  (prints a JSON list of trajectories)
"""

from __future__ import annotations

import ast
import inspect
import json
import sys
from importlib import resources

from bfcl_eval.eval_checker.multi_turn_eval import multi_turn_utils as mtu

DATA = resources.files("bfcl_eval") / "data"
MIN_CHARS = 15_000  # about 4k tokens: shorter histories never need compaction


def load(name: str) -> list[dict]:
    return [json.loads(line) for line in (DATA / name).read_text().splitlines() if line.strip()]


def parse_call(text: str, instances: dict) -> tuple[str, dict]:
    node = ast.parse(text, mode="eval").body
    assert isinstance(node, ast.Call)
    name = node.func.attr if isinstance(node.func, ast.Attribute) else node.func.id
    kwargs = {k.arg: ast.literal_eval(k.value) for k in node.keywords}
    if node.args:
        method = next(getattr(i, name) for i in instances.values() if hasattr(i, name))
        params = [p for p in inspect.signature(method).parameters if p != "self"]
        kwargs.update({p: ast.literal_eval(a) for p, a in zip(params, node.args, strict=False)})
    return name, kwargs


def literals(value) -> list[str]:
    if isinstance(value, dict):
        return [s for v in value.values() for s in literals(v)]
    if isinstance(value, list):
        return [s for v in value for s in literals(v)]
    if isinstance(value, bool) or value is None:
        return []
    text = str(value)
    return [text] if len(text) >= 3 else []


def replay(task: dict, answer: dict, category: str) -> dict | None:
    turns, truth = task["question"], answer["ground_truth"]
    if len(turns) < 2 or any(not t for t in turns) or len(truth) != len(turns):
        return None
    messages: list[dict] = [
        {"role": "system", "content": "You are an assistant that completes tasks with tools."}
    ]
    instances: dict = {}
    for n, (turn, calls) in enumerate(zip(turns, truth, strict=True)):
        messages.extend({"role": m["role"], "content": m["content"]} for m in turn)
        if n == len(turns) - 1:
            break
        results, instances = mtu.execute_multi_turn_func_call(
            calls,
            task["initial_config"],
            task["involved_classes"],
            "bench",
            task["id"],
            long_context=category == "long_context",
        )
        for k, (call, result) in enumerate(zip(calls, results, strict=True)):
            name, kwargs = parse_call(call, instances)
            cid = f"call_{n}_{k}"
            messages.append(
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": cid,
                            "type": "function",
                            "function": {"name": name, "arguments": json.dumps(kwargs)},
                        }
                    ],
                }
            )
            messages.append({"role": "tool", "tool_call_id": cid, "content": str(result)})
        messages.append({"role": "assistant", "content": "Done."})
    last_user = messages[-1]["content"]
    earlier = "\n".join(
        m["content"] for m in messages[1:-1] if m["role"] in ("tool", "user") and m["content"]
    )
    evidence = [{"text": last_user, "kind": "task"}]
    if not instances:  # the last turn's calls need instances to resolve positional arguments
        _, instances = mtu.execute_multi_turn_func_call(
            [], task["initial_config"], task["involved_classes"], "bench", task["id"]
        )
    for call in truth[-1]:
        _, kwargs = parse_call(call, instances)
        for value in literals(kwargs):
            if value in earlier and value not in last_user:
                evidence.append({"text": value, "kind": "value"})
    evidence = list({e["text"]: e for e in evidence}.values())
    return {
        "id": f"bfcl-{task['id']}",
        "kind": "bfcl",
        "messages": messages,
        "evidence": evidence,
        "tools": None,
    }


def main(count: int) -> None:
    """The first COUNT long-context tasks whose history is long enough to need compaction."""
    tasks = load("BFCL_v4_multi_turn_long_context.json")
    answers = load("possible_answer/BFCL_v4_multi_turn_long_context.json")
    by_id = {a["id"]: a for a in answers}
    out = []
    for task in tasks:
        traj = replay(task, by_id[task["id"]], "long_context")
        if traj and len(traj["evidence"]) > 1 and len(json.dumps(traj["messages"])) > MIN_CHARS:
            out.append(traj)
        if len(out) >= count:
            break
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main(int(sys.argv[1]))
