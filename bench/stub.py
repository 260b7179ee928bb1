"""The benchmarks' scripted upstream: answers at once from pre-built bytes, in its own process
(`python -m bench.stub --port N`)."""

from __future__ import annotations

import argparse
import json
import re
from typing import Any

from proxy.testing.histories import assistant_step

MODEL = "bench"
_STREAM = re.compile(rb'"stream"\s*:\s*true')
WORDS_OUT = ["Done", ":", " the", " fix", " is", " in", " db", ".py", "."]


def _completion(message: dict[str, Any], prompt_tokens: int) -> bytes:
    return json.dumps(
        {
            "id": "chatcmpl-bench",
            "object": "chat.completion",
            "created": 1700000000,
            "model": MODEL,
            "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
            "usage": {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": 9,
                "total_tokens": prompt_tokens + 9,
            },
        }
    ).encode()


def _chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
    data = {
        "id": "chatcmpl-bench",
        "object": "chat.completion.chunk",
        "created": 1700000000,
        "model": MODEL,
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }
    return b"data: " + json.dumps(data).encode() + b"\n\n"


STREAM_CHUNKS = (
    [_chunk({"role": "assistant", "content": ""})]
    + [_chunk({"content": w}) for w in WORDS_OUT]
    + [_chunk({}, "stop"), b"data: [DONE]\n\n"]
)


MESSAGE_ANSWER = json.dumps(
    {
        "id": "msg_bench",
        "type": "message",
        "role": "assistant",
        "model": MODEL,
        "content": [{"type": "text", "text": "".join(WORDS_OUT)}],
        "stop_reason": "end_turn",
        "usage": {"input_tokens": 1000, "output_tokens": 9},
    }
).encode()
RESPONSE_ANSWER = json.dumps(
    {
        "id": "resp_bench",
        "object": "response",
        "status": "completed",
        "model": MODEL,
        "output": [
            {
                "type": "message",
                "id": "msg_bench",
                "role": "assistant",
                "content": [{"type": "output_text", "text": "".join(WORDS_OUT)}],
            }
        ],
        "usage": {"input_tokens": 1000, "output_tokens": 9, "total_tokens": 1009},
    }
).encode()


def upstream_app(agent: bool = False) -> Any:
    """Answers every chat completion at once. `agent`: the answer is the next assistant_step
    (so a session replayed through a proxy stays one unbranched history)."""
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse, Response, StreamingResponse
    from starlette.routing import Route

    text = {"role": "assistant", "content": "".join(WORDS_OUT)}

    async def chat(request: Request) -> Response:
        body = await request.body()
        prompt_tokens = len(body) // 4
        if _STREAM.search(body):

            async def chunks():
                for c in STREAM_CHUNKS:
                    yield c

            return StreamingResponse(chunks(), media_type="text/event-stream")
        message = text
        if agent:
            msgs = json.loads(body)["messages"]
            message = assistant_step(sum(1 for m in msgs if m.get("role") == "tool"))
        return Response(_completion(message, prompt_tokens), media_type="application/json")

    async def models(request: Request) -> Response:
        data = [{"id": MODEL, "object": "model", "owned_by": "bench"}]
        return JSONResponse({"object": "list", "data": data})

    async def messages(request: Request) -> Response:  # the agent profiles' direct reference
        await request.body()
        return Response(MESSAGE_ANSWER, media_type="application/json")

    async def responses(request: Request) -> Response:
        await request.body()
        return Response(RESPONSE_ANSWER, media_type="application/json")

    routes = [
        Route("/v1/messages", messages, methods=["POST"]),
        Route("/v1/responses", responses, methods=["POST"]),
        Route("/v1/chat/completions", chat, methods=["POST"]),
        Route("/chat/completions", chat, methods=["POST"]),
        Route("/v1/models", models),
        Route("/models", models),
    ]
    return Starlette(routes=routes)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="run the scripted upstream")
    sub = parser.add_subparsers(dest="command", required=True)
    up = sub.add_parser("upstream")
    up.add_argument("--port", type=int, required=True)
    up.add_argument("--agent", action="store_true")
    args = parser.parse_args(argv)
    import uvicorn

    uvicorn.run(
        upstream_app(agent=args.agent),
        host="127.0.0.1",
        port=args.port,
        log_level="warning",
        access_log=False,
    )


if __name__ == "__main__":
    main()
