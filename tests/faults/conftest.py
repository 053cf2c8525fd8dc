"""Real faults against the service as an operator runs it: a small tmpfs as its data dir, ``kill -9`` of its
process, a Docker engine of the test's own stopped and started again, a truncated registry file.

Each test prints its figures (runs in flight, runs lost, events lost or duplicated, log lines per minute during
the fault, seconds to recover) as one ``FAULT-FIGURES {json}`` line; ``bench/faults.py`` collects them. Nothing
about time is asserted. Tests that need root (mounting a tmpfs) or Docker fail instead of skipping when
FLOWER_REQUIRE_DOCKER=1 (CI runs as root with an engine).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "service"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _faults import need  # noqa: E402


@pytest.fixture
def small_disk() -> Iterator[Any]:
    """``small_disk(path, mb)`` mounts a tmpfs of ``mb`` MB at ``path`` (root only); unmounted after the test."""
    mounted: list[Path] = []

    def mount(path: Path, mb: int) -> Path:
        if os.geteuid() != 0:
            need("mounting a tmpfs for the data dir needs root")
        path.mkdir(parents=True, exist_ok=True)
        r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={mb}m,mode=0700", "tmpfs", str(path)],
                           capture_output=True, text=True)
        if r.returncode != 0:
            need(f"mount -t tmpfs failed: {r.stderr.strip()}")
        mounted.append(path)
        return path

    yield mount
    for path in reversed(mounted):
        subprocess.run(["umount", "-l", str(path)], capture_output=True)
