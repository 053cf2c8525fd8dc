"""Runtime construction and its pure decisions (no CLI is started here)."""

from __future__ import annotations

from pathlib import Path

import pytest

from flower.core.runtime import Runtime


def test_missing_credentials_leave_no_folders_behind(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(tmp_path)
    ws, runs = tmp_path / "ws", tmp_path / "runs"
    with pytest.raises(RuntimeError, match="No Anthropic credentials"):
        Runtime(workspace=ws, run_dir=runs)
    assert not ws.exists() and not runs.exists()
