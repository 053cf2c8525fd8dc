"""A run's checkout and its work coming back as a bundle, on real repositories: the team's repository only
ever changes on ``flower/<run>``, and git never runs with anything the run wrote."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from sandbox.checkpoint import checkpoint
from sandbox.worktree import (
    AHEAD_BRANCH,
    BranchExists,
    NotAGitRepo,
    WorktreeError,
    checkout_ahead,
    delete_branch,
    diff,
    import_bundle,
    make_workspace,
    objects_dir,
    remove_workspace,
)


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout


@pytest.fixture
def repo(git_workspace: Path) -> Path:
    return git_workspace


def refs(repo: Path) -> str:
    return git(repo, "for-each-ref", "--format=%(refname) %(objectname)")


def test_checkout_checkpoint_bundle_import_diff(repo: Path, tmp_path: Path) -> None:
    ws, bundle = tmp_path / "runs" / "r1" / "ws", tmp_path / "runs" / "r1" / "work.bundle"
    base = make_workspace(repo, ws, "flower/r1")
    assert base == git(repo, "rev-parse", "HEAD").strip() == git(repo, "rev-parse", "flower/r1").strip()
    assert (ws / "README.md").read_text() == "scratch repo\n"
    assert git(ws, "branch", "--show-current").strip() == "flower/r1"
    assert (ws / ".git").is_dir(), "a git dir of its own, not a linked worktree's pointer"
    assert (ws / ".git/objects/info/alternates").read_text().strip() == str(objects_dir(repo))
    assert git(repo, "worktree", "list").count("\n") == 1

    assert checkpoint(ws, bundle, branch="flower/r1", base=base, message="nothing yet") is None
    assert not bundle.exists(), "nothing past the base: no bundle"
    (ws / "new.txt").write_text("new\n")
    (ws / "README.md").write_text("changed\n")
    tip = checkpoint(ws, bundle, branch="flower/r1", base=base, message="step 1")
    assert tip and bundle.is_file() and git(repo, "rev-parse", "flower/r1").strip() == base, \
        "the team's repository does not change until the service takes the bundle"
    assert import_bundle(repo, bundle, "flower/r1", base=base) == tip == git(repo, "rev-parse", "flower/r1").strip()
    assert git(repo, "log", "-1", "--format=%an <%ae>|%s", "flower/r1").strip() == "flower <flower@localhost>|step 1"
    out = diff(repo, "flower/r1", base=base)
    assert "+++ b/new.txt" in out and "+changed" in out and out.endswith("\n")
    assert git(repo, "status", "--porcelain") == "" and (repo / "README.md").read_text() == "scratch repo\n"
    assert "refs/flower-import" not in refs(repo) and not (repo / ".git" / "FETCH_HEAD").exists()

    remove_workspace(ws)
    assert not ws.exists() and "+++ b/new.txt" in diff(repo, "flower/r1", base=base), "the branch keeps the work"
    delete_branch(repo, "flower/r1")
    assert git(repo, "branch", "--list", "flower/r1") == ""


def test_a_symlink_is_handed_back_as_a_symlink_never_its_target(repo: Path, tmp_path: Path) -> None:
    secret = tmp_path / "other-tenant.env"
    secret.write_text("ANTHROPIC_API_KEY=canary-of-another-tenant\n")
    ws, bundle = tmp_path / "checkout", tmp_path / "work.bundle"
    base = make_workspace(repo, ws, "flower/s")
    (ws / "passwd").symlink_to("/etc/passwd")
    (ws / "their.env").symlink_to(secret)
    checkpoint(ws, bundle, branch="flower/s", base=base, message="links")
    import_bundle(repo, bundle, "flower/s", base=base)
    tree = git(repo, "ls-tree", "flower/s")
    assert "120000 blob" in tree.split("passwd")[0].splitlines()[-1]
    out = diff(repo, "flower/s", base=base)
    assert "new file mode 120000" in out and "canary-of-another-tenant" not in out and "root:" not in out
    assert git(repo, "cat-file", "-p", "flower/s:their.env") == str(secret)


def test_a_bundle_that_does_not_hold_up_changes_nothing(repo: Path, tmp_path: Path) -> None:
    ws = tmp_path / "checkout"
    base = make_workspace(repo, ws, "flower/b")
    before = refs(repo)
    junk = tmp_path / "junk.bundle"
    junk.write_bytes(b"# v2 git bundle\nnot a bundle at all\n")
    with pytest.raises(WorktreeError, match="does not verify"):
        import_bundle(repo, junk, "flower/b", base=base)
    # a history of its own, not descending from the base: refused
    other = tmp_path / "other"
    git(tmp_path, "init", "-q", "-b", "flower/b", str(other))
    (other / "x").write_text("x\n")
    git(other, "add", ".")
    git(other, "-c", "user.name=a", "-c", "user.email=a@b", "commit", "-qm", "unrelated")
    git(other, "bundle", "create", str(tmp_path / "unrelated.bundle"), "flower/b")
    with pytest.raises(WorktreeError, match="does not descend from its base"):
        import_bundle(repo, tmp_path / "unrelated.bundle", "flower/b", base=base)
    # a bundle of another branch: not taken for this one
    (ws / "y").write_text("y\n")
    git(ws, "checkout", "-qb", "main")
    checkpoint(ws, tmp_path / "main.bundle", branch="main", base=base, message="on main")
    with pytest.raises(WorktreeError, match="has no refs/heads/flower/b"):
        import_bundle(repo, tmp_path / "main.bundle", "flower/b", base=base)
    assert refs(repo) == before and "refs/flower-import" not in refs(repo)


def test_git_dir_tricks_in_the_checkout_never_reach_the_service(repo: Path, tmp_path: Path) -> None:
    """The run rewrites its .git, config, hooks and attributes: the service's git never looks there."""
    marker = tmp_path / "pwned"
    ws, bundle = tmp_path / "checkout", tmp_path / "work.bundle"
    base = make_workspace(repo, ws, "flower/g")
    cmd = f"touch {marker}"
    git(ws, "config", "filter.x.clean", cmd)
    git(ws, "config", "core.fsmonitor", cmd)
    (ws / ".gitattributes").write_text("* filter=x diff=x\n")
    git(ws, "config", "diff.x.textconv", cmd)
    (ws / "f").write_text("f\n")
    tip = checkpoint(ws, bundle, branch="flower/g", base=base, message="tricks")
    marker.unlink(missing_ok=True)  # the run's own git may run its own filter: that is inside the sandbox
    assert import_bundle(repo, bundle, "flower/g", base=base) == tip
    assert "diff --git a/f b/f" in diff(repo, "flower/g", base=base)
    assert not marker.exists(), "no filter, fsmonitor or textconv of the run ran on the service's side"


def test_the_repositorys_hooks_never_run(repo: Path, tmp_path: Path) -> None:
    marker = tmp_path / "hook-ran"
    for name in ("post-checkout", "reference-transaction", "post-merge"):
        hook = repo / ".git" / "hooks" / name
        hook.write_text(f"#!/bin/sh\ntouch {marker}\n")
        hook.chmod(0o755)
    ws = tmp_path / "checkout"
    base = make_workspace(repo, ws, "flower/h")
    (ws / "f").write_text("f\n")
    checkpoint(ws, tmp_path / "b", branch="flower/h", base=base, message="m")
    import_bundle(repo, tmp_path / "b", "flower/h", base=base)
    assert not marker.exists()


def test_not_a_git_repository(tmp_path: Path) -> None:
    plain = tmp_path / "plain"
    plain.mkdir()
    with pytest.raises(NotAGitRepo, match="is not a git repository"):
        make_workspace(plain, tmp_path / "wt", "flower/x")
    with pytest.raises(NotAGitRepo):
        make_workspace(tmp_path / "nowhere", tmp_path / "wt", "flower/x")
    assert issubclass(NotAGitRepo, ValueError) and not (tmp_path / "wt").exists()


def test_an_existing_branch_is_a_clear_error(repo: Path, tmp_path: Path) -> None:
    git(repo, "branch", "flower/taken")
    with pytest.raises(BranchExists, match="branch 'flower/taken' already exists"):
        make_workspace(repo, tmp_path / "wt", "flower/taken")
    assert not (tmp_path / "wt").exists()


@pytest.mark.parametrize(("branch", "base", "message"), [
    ("bad..name", "HEAD", "not a valid branch name"),
    ("-x", "HEAD", "not a valid branch name"),
    ("flower/ok", "no-such-ref", "is not a commit"),
])
def test_other_refusals(repo: Path, tmp_path: Path, branch: str, base: str, message: str) -> None:
    before = refs(repo)
    with pytest.raises(WorktreeError, match=message):
        make_workspace(repo, tmp_path / "wt", branch, base=base)
    assert refs(repo) == before


def test_a_folder_in_the_way(repo: Path, tmp_path: Path) -> None:
    (tmp_path / "wt").mkdir()
    (tmp_path / "wt" / "x").write_text("x")
    before = refs(repo)
    with pytest.raises(WorktreeError, match="already exists and is not an empty folder"):
        make_workspace(repo, tmp_path / "wt", "flower/y")
    assert refs(repo) == before, "no branch left behind"


def test_a_checkout_owned_by_another_uid_still_hands_its_work_back(repo: Path, tmp_path: Path) -> None:
    """A container that ran as uid 10001: the service only reads the bundle, never the checkout."""
    if os.geteuid() != 0:
        pytest.skip("needs root to chown")
    ws = tmp_path / "checkout"
    base = make_workspace(repo, ws, "flower/u")
    (ws / "f").write_text("f\n")
    checkpoint(ws, tmp_path / "b", branch="flower/u", base=base, message="m")
    os.chown(tmp_path / "b", 10001, 10001)
    import_bundle(repo, tmp_path / "b", "flower/u", base=base)
    assert "+++ b/f" in diff(repo, "flower/u", base="main")


def test_a_checkout_made_ahead_is_moved_to_its_runs_branch_and_base(repo: Path, tmp_path: Path) -> None:
    first = git(repo, "rev-parse", "HEAD").strip()
    ws = tmp_path / "slot" / "ws"
    ws.mkdir(parents=True)
    assert checkout_ahead(objects_dir(repo), ws) == first  # before any run: the repository's HEAD
    assert (ws / "README.md").is_file() and git(ws, "branch", "--show-current").strip() == AHEAD_BRANCH
    (repo / "later.txt").write_text("committed after the slot was made\n")
    git(repo, "add", ".")
    git(repo, "commit", "-qm", "later")
    base = make_workspace(repo, ws, "flower/r1")  # the claim: the run's own branch at today's HEAD
    assert base == git(repo, "rev-parse", "HEAD").strip() != first
    assert git(ws, "branch", "--show-current").strip() == "flower/r1" and (ws / "later.txt").is_file()
    assert git(ws, "branch", "--list", AHEAD_BRANCH) == ""
    assert git(repo, "rev-parse", "flower/r1").strip() == base
