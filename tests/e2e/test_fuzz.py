"""Schemathesis against ctxproxy's own OpenAPI schema: whatever comes in, no 5xx of ctxproxy's own.

The upstream is the scripted one; its answers (a 5xx included) are passed through as they came,
so a 5xx counts against ctxproxy only when ctxproxy made it (a 502/504 of its own included: the
scripted upstream is up and answers in time).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

schemathesis = pytest.importorskip("schemathesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis.errors import Unsatisfiable  # noqa: E402

from proxy.app import create_app  # noqa: E402
from proxy.testing.servers import ServerThread, make_settings  # noqa: E402


@pytest.fixture(scope="module")
def proxy_url(scripted_server, tmp_path_factory) -> Iterator[str]:
    _, upstream = scripted_server
    cfg = make_settings(
        tmp_path_factory.mktemp("fuzz"),
        upstream.url + "/v1",
        upstreams=[{"name": "scripted", "base_url": upstream.url + "/v1", "read_timeout": 2}],
    )
    with ServerThread(create_app(cfg)) as server:
        yield server.url


def own_error(status: int, headers: Any) -> bool:
    """A 5xx that ctxproxy made rather than relayed: relayed answers carry its session header."""
    return status >= 500 and "x-ctxproxy-session" not in headers


@pytest.mark.parametrize("mode", ["positive", "negative"])
def test_no_5xx_of_its_own(proxy_url: str, mode: str) -> None:
    api = schemathesis.openapi.from_url(proxy_url + "/openapi.json")
    generation = schemathesis.GenerationMode(mode)
    operations = [result.ok() for result in api.get_all_operations()]
    assert len(operations) >= 10
    failures: list[str] = []
    for operation in operations:

        @given(case=operation.as_strategy(generation_mode=generation))
        @settings(
            max_examples=25,
            deadline=None,
            suppress_health_check=list(HealthCheck),
            derandomize=True,
            database=None,
        )
        def fuzz(case: Any) -> None:
            response = case.call(base_url=proxy_url, timeout=10)
            if own_error(response.status_code, response.headers):
                failures.append(
                    f"{case.method} {case.path} -> {response.status_code}: "
                    f"{response.content[:300]!r}\n{case.as_curl_command()}"
                )

        try:
            fuzz()
        except Unsatisfiable:  # negative mode, and no input that could be wrong
            assert generation is schemathesis.GenerationMode.NEGATIVE
    assert not failures, "\n\n".join(failures[:5])
