"""What the README's test command tells a newcomer whose machine has no Chromium."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

HIDE_BROWSER = """
def pytest_collection_modifyitems(items):
    for item in items:  # as on a machine without chromium and chromedriver
        item.module._browser_paths = lambda: None
"""


def test_skipped_browser_tests_are_counted_and_explained(tmp_path: Path) -> None:
    (tmp_path / "no_browser.py").write_text(HIDE_BROWSER)
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no_browser", "-k", "browser"]
        + ["tests/e2e/test_ui.py"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stdout[-2000:]
    assert "3 skipped" in out.stdout.splitlines()[-1]
    assert "3 browser tests of the session viewer SKIPPED" in out.stdout
    assert "sudo apt-get install chromium chromium-driver" in out.stdout
