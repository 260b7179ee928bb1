"""The task benchmark's scripted model acts only on what its request shows."""

from __future__ import annotations

import json
from typing import Any

from proxy.testing.taskmodel import DONE, NO_TASK, TOOLS, TaskModel
from proxy.testing.taskrepo import NO_TESTS, SETTINGS, make_task

TASK = make_task(seed=1, bugs=4)


def step(n: int, name: str, args: dict[str, Any], result: str) -> list[dict[str, Any]]:
    call = {"id": f"c{n}", "type": "function",
            "function": {"name": name, "arguments": json.dumps(args)}}  # fmt: skip
    return [
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": f"c{n}", "content": result},
    ]


def history(prompt: str, bug_index: int = 0) -> list[dict[str, Any]]:
    bug = TASK.bugs[bug_index]
    test_path = bug.test.split("::")[0]
    report = f"FAILED {bug.test} - assert 1 == 2\n1 failed, 3 passed in 0.1s"
    msgs = [{"role": "system", "content": "agent"}, {"role": "user", "content": prompt}]
    msgs += step(1, "list_files", {}, "\n".join(TASK.files))
    msgs += step(2, "run_tests", {}, report)
    msgs += step(3, "read_file", {"path": test_path}, TASK.files[test_path])
    msgs += step(4, "read_file", {"path": bug.path}, TASK.files[bug.path])
    if bug.trap == "signature" or bug.trap == "legacy":
        msgs += step(5, "read_file", {"path": bug.short_path}, TASK.files[bug.short_path])
    return msgs


def answer(model: TaskModel, messages: list[dict[str, Any]]) -> dict[str, Any]:
    return model.answer({"messages": messages, "tools": TOOLS})


def call_of(message: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    fn = message["tool_calls"][0]["function"]
    return fn["name"], json.loads(fn["arguments"])


def test_it_edits_the_failing_function_with_the_exact_old_text() -> None:
    bug = next(b for b in TASK.bugs if not b.trap)
    name, args = call_of(answer(TaskModel(TASK), history(TASK.prompt, TASK.bugs.index(bug))))
    assert (name, args) == ("edit_file", {"path": bug.path, "old_string": bug.old,
                                          "new_string": bug.new})  # fmt: skip


def test_a_folded_source_is_read_again_and_recalled_first_when_offered() -> None:
    bug = next(b for b in TASK.bugs if not b.trap)
    msgs = history(TASK.prompt, TASK.bugs.index(bug))
    msgs[-1] = {**msgs[-1], "content": "[folded: 40 lines]"}
    assert call_of(answer(TaskModel(TASK), msgs)) == ("read_file", {"path": bug.path})
    recall = {"type": "function", "function": {"name": "ctxproxy_recall", "parameters": {}}}
    offered = TaskModel(TASK).answer({"messages": msgs, "tools": [*TOOLS, recall]})
    assert call_of(offered) == ("ctxproxy_recall", {"query": f"def {bug.func}"})


def test_out_of_sight_constraint_lets_it_edit_the_test() -> None:
    bug = next(b for b in TASK.bugs if b.trap == "tests")
    prompt = TASK.prompt.replace(NO_TESTS, "")
    name, args = call_of(answer(TaskModel(TASK), history(prompt, TASK.bugs.index(bug))))
    assert name == "edit_file" and args["path"].startswith("tests/")


def test_without_the_task_it_asks_and_a_user_only_model_ignores_assistant_text() -> None:
    msgs = history(TASK.prompt)
    assert answer(TaskModel(TASK), msgs[:1] + msgs[2:])["content"] == NO_TASK
    passing = step(9, "run_tests", {}, "4 passed in 0.1s")
    settings = step(10, "read_file", {"path": SETTINGS}, TASK.files[SETTINGS])
    said = {"role": "assistant", "content": f"- user: {TASK.correction}"}
    msgs = [*msgs, said, *passing, *settings]
    _, args = call_of(answer(TaskModel(TASK), msgs))
    assert args["new_string"] == f"TAX_RATE = {TASK.rate}"
    _, args = call_of(answer(TaskModel(TASK, strict=True), msgs))
    assert args["new_string"] != f"TAX_RATE = {TASK.rate}"
    msgs[-5] = {"role": "user", "content": TASK.correction}
    assert call_of(answer(TaskModel(TASK, strict=True), msgs))[1]["new_string"].endswith(TASK.rate)
    done = step(11, "edit_file", {"path": SETTINGS, "new_string": f"TAX_RATE = {TASK.rate}"}, "ok")
    done += step(12, "run_tests", {}, "4 passed in 0.1s")
    assert answer(TaskModel(TASK, strict=True), [*msgs, *done])["content"] == DONE
