"""Schemathesis against ctxproxy's own /openapi.json, many more cases than the suite's
tests/e2e/test_fuzz.py: counts cases, statuses, and 5xx that ctxproxy made itself.

    python -m bench.fuzz --examples 500
"""

from __future__ import annotations

import argparse
import collections
import sys
import tempfile
from pathlib import Path
from typing import Any

import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis.errors import Unsatisfiable

from proxy.app import create_app
from proxy.testing.scripted import Script
from proxy.testing.servers import ServerThread, make_settings


def run(examples: int) -> dict[str, Any]:
    statuses: collections.Counter[int] = collections.Counter()
    own_5xx: list[str] = []
    script = Script()
    with ServerThread(script.app) as upstream:
        ups = [{"name": "scripted", "base_url": upstream.url + "/v1", "read_timeout": 2}]
        cfg = make_settings(Path(tempfile.mkdtemp()), upstream.url + "/v1", upstreams=ups)
        with ServerThread(create_app(cfg)) as proxy:
            api = schemathesis.openapi.from_url(proxy.url + "/openapi.json")
            for mode in ("positive", "negative"):
                for result in api.get_all_operations():
                    operation = result.ok()

                    @given(
                        case=operation.as_strategy(
                            generation_mode=schemathesis.GenerationMode(mode)
                        )
                    )
                    @settings(
                        max_examples=examples,
                        deadline=None,
                        suppress_health_check=list(HealthCheck),
                        database=None,
                    )
                    def fuzz(case: Any) -> None:
                        r = case.call(base_url=proxy.url, timeout=10)
                        statuses[r.status_code] += 1
                        if r.status_code >= 500 and "x-ctxproxy-session" not in r.headers:
                            own_5xx.append(
                                f"{case.method} {case.path} {r.status_code} {r.text[:200]}"
                            )

                    try:
                        fuzz()
                    except Unsatisfiable:
                        pass
    return {
        "cases": sum(statuses.values()),
        "statuses": dict(sorted(statuses.items())),
        "own_5xx": own_5xx,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=500, help="per operation and mode")
    result = run(parser.parse_args().examples)
    print(
        f"cases {result['cases']}, statuses {result['statuses']}, own 5xx {len(result['own_5xx'])}"
    )
    for line in result["own_5xx"][:10]:
        print("  ", line)
    return 1 if result["own_5xx"] else 0


if __name__ == "__main__":
    sys.exit(main())
