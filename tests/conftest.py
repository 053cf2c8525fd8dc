"""Shared fixtures. Tests that need Docker fail instead of skipping when FLOWER_REQUIRE_DOCKER=1."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest


def docker_available() -> bool:
    try:
        return subprocess.run(["docker", "info"], capture_output=True, timeout=20).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


@pytest.fixture(scope="session")
def docker_engine() -> None:
    if docker_available():
        return
    if os.environ.get("FLOWER_REQUIRE_DOCKER") == "1":
        pytest.fail("FLOWER_REQUIRE_DOCKER=1 but no Docker engine answers `docker info`")
    pytest.skip("no Docker engine (set FLOWER_REQUIRE_DOCKER=1 to make this a failure)")


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    ws.mkdir()
    return ws


@pytest.fixture
def git_workspace(workspace: Path) -> Path:
    run = lambda *a: subprocess.run(["git", *a], cwd=workspace, check=True, capture_output=True)  # noqa: E731
    run("init", "-q", "-b", "main")
    run("config", "user.email", "test@flower.invalid")
    run("config", "user.name", "flower test")
    (workspace / "README.md").write_text("scratch repo\n")
    run("add", ".")
    run("commit", "-qm", "init")
    return workspace


@pytest.fixture(autouse=True)
def _no_host_credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    """A developer's real key must never reach a test run, nor change its outcome."""
    for key in ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "CLAUDE_CODE_OAUTH_TOKEN", "ANTHROPIC_BASE_URL",
                "FLOWER_ENV", "ANTHROPIC_MODEL", "ANTHROPIC_DEFAULT_OPUS_MODEL", "CLAUDE_CONFIG_DIR"):
        monkeypatch.setenv(key, "")  # recorded, so whatever a test loads is undone after it
        monkeypatch.delenv(key)
