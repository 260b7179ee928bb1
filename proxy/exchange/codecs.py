"""Each API's converters bundled for the forwarding (proxy/exchange/wire.py)."""

from __future__ import annotations

from typing import Any

from proxy.exchange import previous
from proxy.exchange.wire import Codec
from proxy.formats import anthropic, anthropic_stream, responses, responses_stream


def _is_message(data: Any) -> bool:
    return isinstance(data, dict) and data.get("type") == "message"


MESSAGES = Codec(
    api=anthropic.API,
    path="/messages",
    from_view=anthropic.from_view,
    from_completion=anthropic.from_completion,
    translate=anthropic_stream.translate,
    assembler=anthropic_stream.Assembled,
    is_answer=_is_message,
    neutral_answer=anthropic.neutral_answer,
    usage_to_openai=anthropic.usage_to_openai,
    upstream_error=anthropic.upstream_error_body,
    error_event=anthropic_stream.error_event,
)


def _is_response(data: Any) -> bool:
    return isinstance(data, dict) and data.get("object") == "response"


RESPONSES = Codec(
    api=responses.API,
    path="/responses",
    from_view=responses.from_view,
    from_completion=responses.from_completion,
    translate=responses_stream.translate,
    assembler=responses_stream.Assembled,
    is_answer=_is_response,
    neutral_answer=responses.neutral_answer,
    usage_to_openai=responses.usage_to_openai,
    upstream_error=responses.upstream_error_body,
    error_event=responses_stream.error_event,
    answer_id=previous.response_id,
)
