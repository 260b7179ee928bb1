"""Fitting the real window of a real llama.cpp server (xllamacpp + SmolLM2, 4,096 per slot)."""

from __future__ import annotations

import httpx
import openai
import pytest

from proxy.testing.histories import SYSTEM, TASK, agent_turn
from proxy.testing.llamacpp import LlamaServer
from proxy.testing.servers import ServerThread

pytestmark = pytest.mark.llama


def proxy_for(
    llama: LlamaServer, start_proxy, settings_for, compaction=None, **upstream
) -> ServerThread:
    return start_proxy(
        settings_for(
            upstreams=[
                {
                    "name": "llama",
                    "kind": "llamacpp",
                    "base_url": llama.base_url + "/v1",
                    **upstream,
                }
            ],
            compaction=compaction or {},
        )
    )


def test_exact_mode_predicts_the_prompt_tokens(
    llama: LlamaServer, start_proxy, settings_for
) -> None:
    proxy = proxy_for(llama, start_proxy, settings_for, tokenizer="upstream")
    client = openai.OpenAI(base_url=proxy.url + "/v1", api_key="x")
    histories = [
        [SYSTEM, TASK],
        [SYSTEM, TASK, *agent_turn(0)],
        [TASK, *agent_turn(1), *agent_turn(2), {"role": "user", "content": "日本語で"}],
    ]
    for messages in histories:
        r = client.chat.completions.with_raw_response.create(
            model="smollm2", messages=messages, max_tokens=4, temperature=0
        )
        assert int(r.headers["x-ctxproxy-tokens-compiled"]) == r.parse().usage.prompt_tokens


def test_long_agent_session_fits_every_turn(llama: LlamaServer, start_proxy, settings_for) -> None:
    # The shipped configuration: it fires rarely and in large steps, so most turns only append
    # and the server reuses its cached prefix.
    proxy = proxy_for(llama, start_proxy, settings_for)
    client = openai.OpenAI(
        base_url=proxy.url + "/v1",
        api_key="x",
        timeout=120,
        default_headers={"X-Session-Id": "agent-40"},
    )
    messages = [SYSTEM, TASK]
    rows = []
    for turn in range(40):
        messages += agent_turn(turn)
        r = client.chat.completions.with_raw_response.create(
            model="smollm2", messages=messages, max_tokens=8, temperature=0
        )
        usage = r.parse().usage
        rows.append(
            {
                "turn": turn,
                "predicted": int(r.headers["x-ctxproxy-tokens-compiled"]),
                "original": int(r.headers["x-ctxproxy-tokens-original"]),
                "prompt_tokens": usage.prompt_tokens,
                "cached": usage.prompt_tokens_details.cached_tokens,
                "compaction": r.headers["x-ctxproxy-compaction"],
            }
        )
        assert usage.prompt_tokens < 4096  # llama.cpp accepts prompts shorter than n_ctx

    # The same history sent directly is far past the window and refused.
    direct = httpx.post(
        llama.base_url + "/v1/chat/completions",
        timeout=60,
        json={"model": "smollm2", "messages": messages, "max_tokens": 8},
    )
    assert direct.status_code == 400
    assert direct.json()["error"]["type"] == "exceed_context_size_error"

    # Calibrated estimates converge on the real tokenizer.
    errors = [abs(x["predicted"] - x["prompt_tokens"]) / x["prompt_tokens"] for x in rows[10:]]
    print("\nturn original predicted prompt_tokens cached compaction")
    for x in rows:
        print(
            f"{x['turn']:4} {x['original']:8} {x['predicted']:9} {x['prompt_tokens']:13} "
            f"{x['cached']:6} {x['compaction']}"
        )
    mean = sum(errors) / len(errors)
    print(f"relative error after turn 10: mean {mean:.2%}, max {max(errors):.2%}")
    assert mean <= 0.03

    exchanges = httpx.get(proxy.url + "/sessions/agent-40/exchanges").json()["data"]
    # 40 turns; on a loaded machine the client may retry one after a timeout (a retry, same turn)
    assert len({x["turn"] for x in exchanges}) == 40
    assert any(x["phases"] for x in exchanges)
    assert rows[-1]["original"] > 2 * 4096
    reused = sum(x["cached"] for x in rows[1:]) / sum(x["prompt_tokens"] for x in rows[1:])
    fired = [x["turn"] for x in rows if x["compaction"] != "none"]
    print(f"passes fired at turns {fired}; prompt tokens from the server's cache: {reused:.0%}")
    # Hysteresis: a pass every few turns, not every turn, so the cached prefix survives.
    assert 1 <= len(fired) <= 12
    assert reused >= 0.65
