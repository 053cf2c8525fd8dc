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


def test_errors_have_one_root_and_keep_the_builtin_types_callers_catch(tmp_path: Path) -> None:
    from flower.core.credentials import check_credentials
    from flower.core.errors import ConfigError, CredentialsError, FlowerError, ManifestError, StepAbort, StepError
    from flower.core.manifest import read_rows
    from flower.store import PruningSessionStore, TrimmingSessionStore, TrimPolicy
    from flower.workflow import Step
    from flower.core.agent import AgentSpec, CompactPolicy

    with pytest.raises(CredentialsError) as creds:
        check_credentials(cwd=tmp_path, home=tmp_path, code_root=tmp_path)
    assert isinstance(creds.value, RuntimeError) and isinstance(creds.value, FlowerError)
    assert creds.value.looked[0] == "the process environment" and len(creds.value.looked) == 6
    (tmp_path / "manifest.json").write_text("{")
    with pytest.raises(ManifestError) as bad:
        read_rows(tmp_path / "manifest.json")
    assert isinstance(bad.value, RuntimeError) and bad.value.path == tmp_path / "manifest.json"
    with pytest.raises(StepError) as step:
        Step("_x", AgentSpec("a", ""), "p")
    assert isinstance(step.value, ValueError) and step.value.step == "_x"
    with pytest.raises(ConfigError) as cfg:
        TrimmingSessionStore(tmp_path / "s.db", tmp_path, TrimPolicy(spill_dirname="/abs"))
    assert cfg.value.setting == "TrimPolicy.spill_dirname" and isinstance(cfg.value, ValueError)
    with pytest.raises(TypeError) as order:
        PruningSessionStore(tmp_path / "s.db", tmp_path, None, TrimPolicy())  # type: ignore[arg-type]
    assert isinstance(order.value, FlowerError)
    with pytest.raises(ConfigError):
        CompactPolicy("nope").env()
    assert issubclass(StepAbort, FlowerError)
