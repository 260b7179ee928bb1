"""The benchmarks in miniature need the bench extra; without it they skip and say so."""

import importlib.util

import pytest

BENCH_EXTRA = ("matplotlib", "psutil", "numpy", "tqdm")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    missing = [name for name in BENCH_EXTRA if importlib.util.find_spec(name) is None]
    if not missing:
        return
    skip = pytest.mark.skip(reason=f"needs the bench extra (pip install -e '.[bench]'): {missing}")
    for item in items:
        if item.get_closest_marker("bench"):
            item.add_marker(skip)
