"""ctxproxy_recall's query search (RE2, or str.find for words) against `re` line by line.

Ordinary queries over a long agent history (200 tool outputs, ~3.8 MB), then the hostile ones
that `re` backtracks on. Prints a table of medians: figure, baseline (`re`), ratio.
Run: `python -m bench.recall_search` (`--quick`: 3 runs instead of 7, fewer outputs).
"""

from __future__ import annotations

import argparse
import re
import statistics
import time
from collections.abc import Callable
from pathlib import Path

from proxy.recall.search import compile_query
from proxy.testing.histories import log_lines

QUERIES = [
    "DATABASE_PORT",
    r"def \w+\(",
    r"FAILED .*::test_\w+",
    r"batch 1[0-9]{2}$",
    "error|warning",
]
FIXTURES = Path(__file__).resolve().parents[1] / "tests" / "unit" / "strategies" / "fixtures"
HOSTILE = ["(a+)+$", "(a|aa)+$"]
EVIL_LINE = "a" * 22 + "!"  # 22, not 26: `re` must end in the baseline column too


def history(outputs: int) -> list[str]:
    failures = (FIXTURES / "pytest_failures.txt").read_text()
    return [failures if n % 3 else log_lines(400) for n in range(outputs)]


def per_line_re(query: str) -> Callable[[str], list[int]]:
    """What recall did before: Python's `re` on each line."""
    pattern = re.compile(query, re.IGNORECASE)
    return lambda text: [n for n, line in enumerate(text.split("\n")) if pattern.search(line)]


def median_ms(search: Callable[[str], list[int]], texts: list[str], runs: int) -> float:
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        for text in texts:
            search(text)
        times.append(time.perf_counter() - started)
    return statistics.median(times) * 1000


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    runs, texts = (3, history(30)) if args.quick else (7, history(200))
    print(f"{sum(map(len, texts)):,} characters, median of {runs} runs (ms)")
    print(f"{'query':<24} {'now (ms)':>10} {'re (ms)':>10} {'ratio':>7}")
    for query in QUERIES:
        new = median_ms(compile_query(query).lines, texts, runs)
        old = median_ms(per_line_re(query), texts, runs)
        print(f"{query:<24} {new:>10.1f} {old:>10.1f} {new / old:>7.2f}")
    for query in HOSTILE:
        planted = [texts[0] + "\n" + EVIL_LINE]
        new = median_ms(compile_query(query).lines, planted, 1)
        old = median_ms(per_line_re(query), planted, 1)
        print(f"{query + ' (planted line)':<24} {new:>10.1f} {old:>10.1f} {new / old:>7.4f}")


if __name__ == "__main__":
    main()
