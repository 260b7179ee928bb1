"""OpenAI chat wire models: validate what a client sent, keep every field we do not know."""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from proxy.errors import BadRequest


class _Open(BaseModel):
    model_config = ConfigDict(extra="allow")


class FunctionCall(_Open):
    name: str
    arguments: str


class ToolCall(_Open):
    id: str
    type: str = "function"
    function: FunctionCall


class ChatMessage(_Open):
    role: Literal["system", "developer", "user", "assistant", "tool", "function"]
    content: str | list[dict[str, Any]] | None = None
    name: str | None = None
    tool_calls: list[ToolCall] | None = None
    tool_call_id: str | None = None

    @field_validator("content")
    @classmethod
    def _parts_have_type(cls, v: Any) -> Any:
        if isinstance(v, list) and not all(isinstance(p.get("type"), str) for p in v):
            raise ValueError("every content part needs a string 'type'")
        return v


class StreamOptions(_Open):
    include_usage: bool | None = None


class ChatRequest(_Open):
    model: str = Field(min_length=1)
    messages: list[ChatMessage] = Field(min_length=1)
    stream: bool | None = False
    stream_options: StreamOptions | None = None
    tools: list[dict[str, Any]] | None = None
    max_tokens: int | None = Field(None, ge=0)
    max_completion_tokens: int | None = Field(None, ge=0)
    user: str | None = None
    metadata: dict[str, Any] | None = None


def parse_json(raw: bytes) -> dict[str, Any]:
    try:
        data = json.loads(raw)
    except RecursionError:
        raise BadRequest("Invalid JSON body: nested too deeply") from None
    except (UnicodeDecodeError, ValueError) as exc:
        raise BadRequest(f"Invalid JSON body: {exc}") from None
    if not isinstance(data, dict):
        raise BadRequest("The request body must be a JSON object")
    if b"\\ud" in raw.lower() and not _is_valid_unicode(data):
        raise BadRequest("Invalid JSON body: a string holds an unpaired UTF-16 surrogate")
    return data


def _is_valid_unicode(data: Any) -> bool:
    try:
        json.dumps(data, ensure_ascii=False).encode()
    except UnicodeEncodeError:
        return False
    return True


def parse_chat(data: dict[str, Any]) -> ChatRequest:
    try:
        return ChatRequest.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(p) for p in err["loc"])
        raise BadRequest(f"Invalid request: {where}: {err['msg']}", param=where) from None
