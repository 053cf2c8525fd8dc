"""RunLayout: one rule for every path of a run; ids that would escape the runs folder are refused."""

from __future__ import annotations

from pathlib import Path

import pytest

from flower.workflow import starter_paths
from sandbox.layout import RunLayout, valid_run_id


def test_every_path_of_a_run(tmp_path: Path) -> None:
    lay = RunLayout(tmp_path / "runs", "r-1", "team")
    d = (tmp_path / "runs" / "r-1").resolve()
    assert lay.dir == d and lay.workspace == d / "team" and lay.workbench == d / ".flower-team"
    assert (lay.run_dir, lay.mailbox, lay.home) == (d / "run", d / "mailbox", d / "home")
    assert (lay.env_file, lay.spec_file, lay.events, lay.exit_file, lay.questions, lay.bundle) == (
        d / "mailbox/flower.env", d / "mailbox/spec.json", d / "outbox/events.jsonl", d / "outbox/exit.json",
        d / "outbox/questions", d / "outbox/work.bundle")
    assert lay.writable == (lay.workspace, lay.workbench, lay.run_dir, lay.home, lay.outbox), \
        "the mailbox, spec and env file are never the run's to write"
    assert lay.branch == "flower/r-1"
    # exactly flower's isolate rule: <ws>.parent/.flower-<ws.name>
    assert lay.workbench == starter_paths(lay.workspace, run_dir=lay.run_dir, isolate=True).workbench


def test_ensure_makes_the_folders_but_not_the_worktree(tmp_path: Path) -> None:
    lay = RunLayout(tmp_path, "r1", "repo").ensure()
    assert all(p.is_dir() for p in (lay.dir, lay.workbench, lay.run_dir, lay.mailbox, lay.home, lay.questions))
    assert all(p.stat().st_mode & 0o777 == 0o700 for p in (lay.dir, lay.outbox, lay.mailbox)), "private folders"
    assert not lay.workspace.exists()
    assert lay.ensure() == lay  # idempotent


@pytest.mark.parametrize("run_id", ["../x", "..", "a/b", "/abs", "", "A1", "-x", "x_y", "a.b", "x" * 64, "é",
                                    "a\nb", None, 7])
def test_a_run_id_that_could_escape_is_refused(tmp_path: Path, run_id: object) -> None:
    assert not valid_run_id(run_id)
    with pytest.raises(ValueError, match="run id .* is not valid"):
        RunLayout(tmp_path, run_id, "repo")  # type: ignore[arg-type]


@pytest.mark.parametrize("run_id", ["0", "a", "run-1", "x" * 63, "2026-01-01-abc"])
def test_valid_run_ids(tmp_path: Path, run_id: str) -> None:
    assert RunLayout(tmp_path, run_id, "repo").dir == tmp_path.resolve() / run_id


@pytest.mark.parametrize("name", ["../x", "a/b", ".git", ".flower-x", "", "..", "x y"])
def test_a_repository_name_that_could_escape_is_refused(tmp_path: Path, name: str) -> None:
    with pytest.raises(ValueError, match="repository name"):
        RunLayout(tmp_path, "r1", name)


def test_of_spec_file_needs_the_spec_in_its_run_folder(tmp_path: Path) -> None:
    lay = RunLayout(tmp_path, "r1", "repo")
    assert RunLayout.of_spec_file(lay.spec_file, "r1", "repo") == lay
    with pytest.raises(ValueError, match="must sit in its run's folder"):
        RunLayout.of_spec_file(tmp_path / "elsewhere" / "spec.json", "r1", "repo")
    # a run that claimed a warm slot keeps the slot's folder; its branch is still named by the run
    slot = RunLayout(tmp_path, "r2", "repo", folder="warm-0123")
    assert slot.dir == tmp_path.resolve() / "warm-0123" and slot.branch == "flower/r2"
    assert RunLayout.of_spec_file(slot.spec_file, "r2", "repo") == slot
    with pytest.raises(ValueError, match="run id"):
        RunLayout(tmp_path, "r2", "repo", folder="../x")
