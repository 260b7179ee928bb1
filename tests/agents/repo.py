"""The scratch repo the agents work in: a small package whose `add` subtracts, one failing test.

Beside the buggy module sit a few ordinary modules the agent reads too, so the history grows
past small windows and compaction has old tool output to fold.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from proxy.testing.coder import BUG

ARITH = f'''"""Arithmetic on plain numbers."""


def add(a: float, b: float) -> float:
    """The sum of a and b."""
    {BUG}


def mul(a: float, b: float) -> float:
    """The product of a and b."""
    return a * b
'''

TESTS = """from calc.arith import add, mul


def test_add():
    assert add(2, 3) == 5


def test_mul():
    assert mul(2, 3) == 6
"""

UNITS = ("metre", "gram", "second", "ampere", "kelvin", "mole", "candela", "litre")


def _module(topic: str, functions: int) -> str:
    """An ordinary module of `functions` small converters: plausible code, a few kB each."""
    parts = [f'"""Conversions for {topic}: each function scales a value by a fixed factor."""\n']
    for i in range(functions):
        unit = UNITS[i % len(UNITS)]
        parts.append(
            f"\n\ndef {topic}_{unit}_{i}(value: float) -> float:\n"
            f'    """Convert a {topic} quantity in {unit}s to the base unit (table row {i})."""\n'
            f"    factor = {(i + 3) * 7 / 11:.6f}\n"
            f"    offset = {(i * 13) % 17}\n"
            f"    if value < 0:\n"
            f'        raise ValueError("{topic} {unit}: a negative quantity has no meaning")\n'
            f"    return value * factor + offset\n"
        )
    return "".join(parts)


PADDING = {"calc/lengths.py": "length", "calc/masses.py": "mass", "calc/times.py": "time"}


def make_repo(root: Path, functions: int = 24) -> list[str]:
    """Write the package into root; return the sources to read, the buggy module first."""
    (root / "calc").mkdir(parents=True)
    (root / "tests").mkdir()
    (root / "calc" / "__init__.py").write_text('"""A small calculator package."""\n')
    (root / "calc" / "arith.py").write_text(ARITH)
    for path, topic in PADDING.items():
        (root / path).write_text(_module(topic, functions))
    (root / "tests" / "test_arith.py").write_text(TESTS)
    (root / "pyproject.toml").write_text(
        '[project]\nname = "calc"\nversion = "0.1.0"\n\n[tool.pytest.ini_options]\n'
        'pythonpath = ["."]\naddopts = "-p no:cacheprovider"\n'
    )
    return ["calc/arith.py", *PADDING]


def repo_tests_pass(root: Path) -> tuple[bool, str]:
    """Run the scratch repo's tests ourselves, after the agent is done."""
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q"],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"},
    )
    return done.returncode == 0, done.stdout[-2000:]
