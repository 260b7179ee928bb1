"""Errors a client can see, each rendered in OpenAI's envelope.

ProxyError
 ├── BadRequest               400 invalid_request_error
 │    └── ContextLengthExceeded   400 code=context_length_exceeded
 ├── Unauthorized             401 authentication_error
 ├── Forbidden                403 permission_error
 ├── NotFound                 404 (ModelNotFound: code=model_not_found)
 ├── MethodNotAllowed         405 code=method_not_allowed
 ├── PayloadTooLarge          413
 ├── UnsupportedMediaType     415 code=unsupported_media_type
 ├── UpstreamUnavailable      502 upstream_error
 │    ├── UpstreamInvalid        502 code=upstream_invalid_response
 │    └── UpstreamTooLarge       502 code=upstream_response_too_large
 ├── StorageUnavailable       503 code=storage_unavailable (disk full, database down)
 └── UpstreamTimeout          504 upstream_error
"""

from __future__ import annotations

import json
from typing import Any


class ProxyError(Exception):
    status = 500
    type = "server_error"
    code: str | None = None
    headers: dict[str, str] | None = None

    def __init__(self, message: str, *, param: str | None = None, code: str | None = None):
        super().__init__(message)
        self.message = message
        self.param = param
        if code is not None:
            self.code = code

    def body(self) -> dict[str, Any]:
        return error_body(self.message, self.type, self.param, self.code)


class BadRequest(ProxyError):
    status = 400
    type = "invalid_request_error"


class ContextLengthExceeded(BadRequest):
    """The prompt cannot fit even in its most compact form. `needed` and `budget` are on the
    same basis, the whole prompt (tools included); with `prompts`, `tools` and `reserve` known
    the message names the fixed part (system/developer prompts and tool definitions) when it
    alone leaves the conversation no room, else the conversation's largest message."""

    code = "context_length_exceeded"

    def __init__(
        self,
        needed: int,
        budget: int,
        window: int | None,
        largest: tuple[int, str, int] | None = None,
        *,
        prompts: int | None = None,
        tools: int = 0,
        reserve: int | None = None,
    ):
        self.needed, self.budget, self.window = needed, max(budget, 0), window
        self.fixed = None if prompts is None else prompts + tools
        where = _room(self.budget, window, reserve)
        if self.fixed is not None and self.fixed >= self.budget:
            message = (
                f"This request's fixed part alone does not fit: its system/developer prompts "
                f"({prompts} tokens) and tool definitions ({tools} tokens) take {self.fixed} "
                f"tokens, and {where}. The prompt needs at least {needed} tokens. Use a model "
                f"with a larger context window, or a shorter system prompt or fewer tools."
            )
        else:
            over = needed - self.budget
            short = f"{over} more than fit" if over > 0 else "and the upstream refused it"
            message = (
                f"This request needs {needed} tokens even in its most compact form, "
                f"{short}: {where}.{_rest(self.fixed, self.budget)} {_culprit(largest)}"
            )
        super().__init__(message, param="messages")


def _room(budget: int, window: int | None, reserve: int | None) -> str:
    kept = "less the answer's reserve and the safety margin"
    if reserve is not None and window is not None:
        kept = f"{reserve} kept for the answer and {window - reserve - budget} as a safety margin"
    return f"the context window of {window} tokens leaves {budget} for the prompt ({kept})"


def _rest(fixed: int | None, budget: int) -> str:
    if fixed is None:
        return ""
    return (
        f" Its fixed part (system/developer prompts and tools) takes {fixed}, "
        f"leaving {budget - fixed} for the conversation."
    )


def _culprit(largest: tuple[int, str, int] | None) -> str:
    if largest is None:
        return "Shorten the latest messages."
    index, role, tokens = largest
    return (
        f"The largest message is messages[{index}] ({role}, {tokens} tokens even in its "
        f"most compact form): shorten it."
    )


class Unauthorized(ProxyError):
    status = 401
    type = "authentication_error"
    code = "invalid_api_key"


class Forbidden(ProxyError):
    status = 403
    type = "permission_error"
    code = "forbidden"


class NotFound(ProxyError):
    status = 404
    type = "invalid_request_error"
    code = "not_found"


class ModelNotFound(NotFound):
    code = "model_not_found"

    def __init__(self, model: str):
        super().__init__(
            f"The model '{model}' does not exist or no upstream serves it.", param="model"
        )


class MethodNotAllowed(ProxyError):
    status = 405
    type = "invalid_request_error"
    code = "method_not_allowed"

    def __init__(self, message: str, *, allow: str):
        super().__init__(message)
        self.headers = {"allow": allow}


class PayloadTooLarge(ProxyError):
    status = 413
    type = "invalid_request_error"
    code = "request_too_large"


class UnsupportedMediaType(ProxyError):
    status = 415
    type = "invalid_request_error"
    code = "unsupported_media_type"


class UpstreamUnavailable(ProxyError):
    status = 502
    type = "upstream_error"
    code = "upstream_unavailable"


class UpstreamInvalid(UpstreamUnavailable):
    code = "upstream_invalid_response"


class UpstreamTooLarge(UpstreamUnavailable):
    code = "upstream_response_too_large"


class StorageUnavailable(ProxyError):
    status = 503
    type = "server_error"
    code = "storage_unavailable"


class UpstreamTimeout(ProxyError):
    status = 504
    type = "upstream_error"
    code = "upstream_timeout"


def error_body(
    message: str, type_: str, param: str | None = None, code: str | int | None = None
) -> dict[str, Any]:
    return {"error": {"message": message, "type": type_, "param": param, "code": code}}


def sse_error(exc: ProxyError) -> bytes:
    """The SSE event that ends a stream that failed after it began."""
    return b"data: " + json.dumps(exc.body()).encode() + b"\n\ndata: [DONE]\n\n"
