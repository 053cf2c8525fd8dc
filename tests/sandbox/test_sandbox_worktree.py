"""Worktrees on a real repository: a branch per run, the team's checkout untouched, the run's work as a diff."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from sandbox.worktree import (
    BranchExists,
    NotAGitRepo,
    WorktreeError,
    add_worktree,
    commit_all,
    diff,
    git_common_dir,
    remove_worktree,
    worktree_gitdir,
)


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout


@pytest.fixture
def repo(git_workspace: Path) -> Path:
    return git_workspace


def test_add_commit_diff_remove(repo: Path, tmp_path: Path) -> None:
    wt = tmp_path / "runs" / "r1" / "ws"
    base = git(repo, "rev-parse", "HEAD").strip()
    add_worktree(repo, wt, "flower/r1")
    assert (wt / "README.md").read_text() == "scratch repo\n"
    assert git(wt, "branch", "--show-current").strip() == "flower/r1"
    assert worktree_gitdir(wt).parent == repo / ".git" / "worktrees" and git_common_dir(wt) == repo / ".git"

    assert commit_all(wt, "nothing yet") is None, "nothing changed: no commit"
    (wt / "new.txt").write_text("new\n")
    (wt / "README.md").write_text("changed\n")
    sha = commit_all(wt, "run r1", repo=repo)
    assert sha and git(repo, "rev-parse", "flower/r1").strip() == sha
    assert git(repo, "log", "-1", "--format=%an <%ae>|%s", "flower/r1").strip() == "flower <flower@localhost>|run r1"
    out = diff(repo, "flower/r1", base=base)
    assert "+++ b/new.txt" in out and "+changed" in out and out.endswith("\n")

    # not committed yet: still part of what the run changed (new files too), the worktree's index untouched
    (wt / "later.txt").write_text("later\n")
    (wt / "new.txt").unlink()
    index_before = (worktree_gitdir(wt) / "index").read_bytes()
    out = diff(repo, "flower/r1", base="main")
    assert "+++ b/later.txt" in out and "new.txt" not in out and "+changed" in out
    assert (worktree_gitdir(wt) / "index").read_bytes() == index_before
    assert sorted(git(wt, "status", "--porcelain").splitlines()) == [" D new.txt", "?? later.txt"], \
        "diff staged nothing in the worktree's own index"

    # the team's checkout never saw any of it
    assert git(repo, "status", "--porcelain") == "" and git(repo, "branch", "--show-current").strip() == "main"
    assert (repo / "README.md").read_text() == "scratch repo\n" and not (repo / "later.txt").exists()

    remove_worktree(repo, wt)
    assert not wt.exists() and "flower/r1" in git(repo, "branch", "--list", "flower/r1")
    assert "+++ b/new.txt" in diff(repo, "flower/r1", base=base), "the branch keeps the committed work"


def test_remove_can_delete_the_branch_and_prunes_a_vanished_folder(repo: Path, tmp_path: Path) -> None:
    wt = tmp_path / "wt"
    add_worktree(repo, wt, "flower/gone")
    subprocess.run(["rm", "-rf", str(wt)], check=True)
    remove_worktree(repo, wt, keep_branch=False)
    assert git(repo, "branch", "--list", "flower/gone") == ""
    assert str(wt) not in git(repo, "worktree", "list")
    with pytest.raises(WorktreeError, match="is not a worktree of"):
        remove_worktree(repo, wt)


def test_not_a_git_repository(tmp_path: Path) -> None:
    plain = tmp_path / "plain"
    plain.mkdir()
    with pytest.raises(NotAGitRepo, match="is not a git repository"):
        add_worktree(plain, tmp_path / "wt", "flower/x")
    with pytest.raises(NotAGitRepo):
        add_worktree(tmp_path / "nowhere", tmp_path / "wt", "flower/x")
    assert issubclass(NotAGitRepo, ValueError) and not (tmp_path / "wt").exists()


def test_an_existing_branch_is_a_clear_error(repo: Path, tmp_path: Path) -> None:
    git(repo, "branch", "flower/taken")
    with pytest.raises(BranchExists, match="branch 'flower/taken' already exists"):
        add_worktree(repo, tmp_path / "wt", "flower/taken")
    assert not (tmp_path / "wt").exists()


@pytest.mark.parametrize(("branch", "base", "message"), [
    ("bad..name", "HEAD", "not a valid branch name"),
    ("-x", "HEAD", "not a valid branch name"),
    ("flower/ok", "no-such-ref", "is not a commit"),
])
def test_other_refusals(repo: Path, tmp_path: Path, branch: str, base: str, message: str) -> None:
    with pytest.raises(WorktreeError, match=message):
        add_worktree(repo, tmp_path / "wt", branch, base=base)


def test_a_folder_in_the_way(repo: Path, tmp_path: Path) -> None:
    (tmp_path / "wt").mkdir()
    (tmp_path / "wt" / "x").write_text("x")
    with pytest.raises(WorktreeError, match="already exists and is not an empty folder"):
        add_worktree(repo, tmp_path / "wt", "flower/y")


def test_the_repositorys_hooks_never_run(repo: Path, tmp_path: Path) -> None:
    marker = tmp_path / "hook-ran"
    hook = repo / ".git" / "hooks" / "pre-commit"
    hook.write_text(f"#!/bin/sh\ntouch {marker}\n")
    hook.chmod(0o755)
    wt = tmp_path / "wt"
    add_worktree(repo, wt, "flower/h")
    (wt / "f").write_text("f\n")
    assert commit_all(wt, "m", repo=repo)
    assert not marker.exists()


def test_a_worktree_pointing_elsewhere_is_refused(repo: Path, tmp_path: Path) -> None:
    wt = tmp_path / "wt"
    add_worktree(repo, wt, "flower/t")
    evil = tmp_path / "evil"
    evil.mkdir()
    git(evil, "init", "-q")
    (wt / ".git").write_text(f"gitdir: {evil / '.git'}\n")
    (wt / "f").write_text("f\n")
    with pytest.raises(WorktreeError, match="no longer points into"):
        commit_all(wt, "m", repo=repo)
    assert git(evil, "status", "--porcelain") == "", "git never ran in the redirected repository"


def test_a_worktree_owned_by_another_uid_still_commits(repo: Path, tmp_path: Path) -> None:
    """A container that ran as another uid: git on the host would call the worktree 'dubious'."""
    if os.geteuid() != 0:
        pytest.skip("needs root to chown")
    wt = tmp_path / "wt"
    add_worktree(repo, wt, "flower/u")
    (wt / "f").write_text("f\n")
    for p in [wt, *wt.rglob("*")]:
        os.chown(p, 10001, 10001, follow_symlinks=False)
    assert commit_all(wt, "m", repo=repo)
    assert "+++ b/f" in diff(repo, "flower/u", base="main")
