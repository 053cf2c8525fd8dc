"""mypy --strict over flower/ is clean (configuration: [tool.mypy] in pyproject.toml); CI runs this test."""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_mypy_strict_is_clean_over_flower() -> None:
    cache = Path(tempfile.gettempdir()) / "flower-mypy-cache"
    done = subprocess.run([sys.executable, "-m", "mypy", "--cache-dir", str(cache)], cwd=ROOT,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Success: no issues found" in done.stdout
