"""A Responses stream the upstream cuts short ends as a cut chat or Messages stream does: the
client's last event is the Responses API's `error` event, the exchange is closed with the
partial text recorded, and nothing is logged as an unhandled exception."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from proxy.testing.rawfaults import RESPONSES_CUTS
from proxy.testing.rawupstream import RawUpstream
from tests.e2e.test_upstream_answers import record


@pytest.fixture(scope="module")
def raw() -> Iterator[RawUpstream]:
    with RawUpstream() as upstream:
        yield upstream


def last_event(text: str) -> tuple[str | None, dict[str, Any]]:
    """The stream's last event: its name and its data."""
    [*_, last] = [e for e in text.replace("\r\n", "\n").split("\n\n") if e.strip()]
    name, data = None, ""
    for line in last.split("\n"):
        if line.startswith("event:"):
            name = line.removeprefix("event:").strip()
        elif line.startswith("data:"):
            data += line.removeprefix("data:").strip()
    return name, json.loads(data)


@pytest.mark.parametrize("mode", ["compact", "observe"])
@pytest.mark.parametrize("cut", sorted(RESPONSES_CUTS))
def test_a_cut_responses_stream_ends_in_an_error_event_and_a_closed_record(
    raw: RawUpstream, start_proxy, tmp_path: Path, caplog, cut: str, mode: str
) -> None:
    from tests.conftest import make_settings

    upstream = {"name": "raw", "kind": "llamacpp", "base_url": raw.url, "read_timeout": 2}
    proxy = start_proxy(make_settings(tmp_path, raw.url, upstreams=[upstream])).url
    body = {"model": f"responses:{cut}", "input": "Say something.", "stream": True}
    headers = {"x-session-id": "cut", "x-ctxproxy-mode": mode}
    with caplog.at_level(logging.WARNING):
        r = httpx.post(proxy + "/v1/responses", json=body, headers=headers, timeout=10)
        assert r.status_code == 200
        name, data = last_event(r.text)
        x = record(proxy, "cut")
    assert name == "error" and data["type"] == "error"
    assert data["code"] == "upstream_invalid_response"
    assert x["exchange"]["status"] == 200 and x["exchange"]["observed"] is (mode == "observe")
    assert x["error"]["code"] == "upstream_invalid_response"
    if cut != "not-responses":  # the text the upstream had streamed before the cut
        assert x["response"] == {"role": "assistant", "content": "partial text"}
    unhandled = [rec for rec in caplog.records if rec.exc_info]
    assert unhandled == []
