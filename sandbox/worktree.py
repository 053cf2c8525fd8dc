"""A run's git checkout, and its work coming back as data (GitPython, on the service's side only).

The service never runs git where a run can write. So a run does not get a linked worktree of the team's
repository (whose ``.git`` file, config and hooks the run could rewrite): it gets a checkout of its own
(``make_workspace``: ``git init`` + the team's object store as a read-only *alternate*, branch
``flower/<run>`` at the base commit), commits inside its sandbox, and hands its commits back as a git
bundle (``sandbox.checkpoint``). The service copies that bundle out of the run's reach, verifies it and
fetches it into the team's repository with a trusted git dir and fsck on (``import_bundle``); diffs are
computed there, from trusted objects only (``diff``).

Every git command here runs with system and global config off, hooks and fsmonitor off, no external diff
or textconv drivers, and no terminal prompts.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import git
from git.exc import GitCommandError, InvalidGitRepositoryError, NoSuchPathError

__all__ = ["make_workspace", "remove_workspace", "import_bundle", "diff", "objects_dir", "delete_branch",
           "NotAGitRepo", "BranchExists", "WorktreeError", "GIT_ENV", "SAFE_CONFIG"]

SAFE_CONFIG = ["core.hooksPath=/dev/null", "core.fsmonitor=false", "core.untrackedCache=false",
               "transfer.fsckObjects=true", "fetch.fsckObjects=true", "receive.fsckObjects=true",
               "protocol.allow=never", "protocol.file.allow=always", "core.symlinks=true"]
GIT_ENV = {"GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull, "GIT_TERMINAL_PROMPT": "0",
           "GIT_ATTR_NOSYSTEM": "1"}
_DIFF = ("--binary", "--no-ext-diff", "--no-textconv")
GIT_TIMEOUT_S = 300  # a bundle that makes git work longer than this is refused


class WorktreeError(RuntimeError):
    """A git operation that git refused, or a run's work that does not hold up; the message says why."""


class NotAGitRepo(ValueError):
    """The given path is not a git repository."""


class BranchExists(ValueError):
    """The branch a new run should create already exists."""


def _open(path: Path) -> git.Repo:
    try:
        repo = git.Repo(path)
    except (InvalidGitRepositoryError, NoSuchPathError):
        raise NotAGitRepo(f"{path} is not a git repository: give the path of a clone (or run `git init` there)") \
            from None
    repo.git.set_persistent_git_options(c=SAFE_CONFIG)
    repo.git.update_environment(**GIT_ENV)
    return repo


def _fail(what: str, e: GitCommandError) -> WorktreeError:
    reason = (e.stderr or e.stdout or str(e)).strip().replace("stderr: ", "").strip("'\n ")
    return WorktreeError(f"{what}: {reason}")


def objects_dir(repo: str | Path) -> Path:
    """The team repository's object store: the one thing of it a run sees (read-only, as an alternate)."""
    r = _open(Path(repo).expanduser().resolve())
    try:
        common = Path(r.git.rev_parse("--git-common-dir"))
        common = common if common.is_absolute() else Path(r.working_tree_dir or r.git_dir) / common
        return (common / "objects").resolve()
    finally:
        r.close()


def _check_branch(r: git.Repo, repo: Path, branch: str) -> None:
    try:
        if branch.startswith("-"):
            raise GitCommandError("check-ref-format", 1)
        r.git.check_ref_format("--branch", branch)
    except GitCommandError:
        raise WorktreeError(f"{branch!r} is not a valid branch name") from None
    if r.git.branch("--list", branch).strip():
        raise BranchExists(f"branch {branch!r} already exists in {repo}: a run needs a fresh branch "
                           f"(pick another run id, or delete the branch with `git branch -D {branch}`)")


def make_workspace(repo: str | Path, path: str | Path, branch: str, *, base: str = "HEAD") -> str:
    """Create ``branch`` at ``base`` in ``repo`` and a checkout of it at ``path`` with a git dir of its own
    (the team's objects borrowed read-only); returns the base commit's sha.

    Raises NotAGitRepo, BranchExists, or WorktreeError (an unknown ``base``, a bad branch name, a ``path``
    that is not an empty folder). Nothing is left behind when it fails.
    """
    repo, path = Path(repo).expanduser().resolve(), Path(path).expanduser().resolve()
    r = _open(repo)
    made_branch = False
    try:
        _check_branch(r, repo, branch)
        try:
            sha = r.git.rev_parse("--verify", "--quiet", f"{base}^{{commit}}").strip()
        except GitCommandError:
            raise WorktreeError(f"base {base!r} is not a commit in {repo}") from None
        if path.exists() and (not path.is_dir() or any(path.iterdir())):
            raise WorktreeError(f"{path} already exists and is not an empty folder")
        objects = objects_dir(repo)
        r.git.branch(branch, sha)
        made_branch = True
        path.mkdir(parents=True, exist_ok=True, mode=0o700)
        env = {**os.environ, **GIT_ENV}
        cfg = [a for c in SAFE_CONFIG for a in ("-c", c)]

        def g(*args: str) -> None:
            out = subprocess.run(["git", *cfg, "-C", str(path), *args], env=env, capture_output=True, text=True)
            if out.returncode != 0:
                raise WorktreeError(f"git {args[0]} in the new checkout {path} failed: {out.stderr.strip()[-300:]}")

        g("init", "-q", "--template=", f"--initial-branch={branch}")
        (path / ".git" / "objects" / "info").mkdir(parents=True, exist_ok=True)
        (path / ".git" / "objects" / "info" / "alternates").write_text(f"{objects}\n")
        g("update-ref", f"refs/heads/{branch}", sha)
        g("reset", "-q", "--hard", sha)
        return sha
    except BaseException:
        if made_branch:
            try:
                r.git.branch("-D", branch)
            except GitCommandError:
                pass
        shutil.rmtree(path, ignore_errors=True)
        raise
    finally:
        r.close()


def remove_workspace(path: str | Path) -> None:
    """Delete a run's checkout (symlinks inside are removed, never followed)."""
    shutil.rmtree(Path(path), ignore_errors=True)


def delete_branch(repo: str | Path, branch: str) -> None:
    r = _open(Path(repo).expanduser().resolve())
    try:
        r.git.branch("-D", branch)
    except GitCommandError as e:
        raise _fail(f"git could not delete branch {branch}", e) from None
    finally:
        r.close()


def import_bundle(repo: str | Path, bundle: str | Path, branch: str, *, base: str) -> str:
    """Fetch ``refs/heads/<branch>`` of ``bundle`` (a copy the run can no longer touch) into ``repo``'s
    ``branch``; returns the new tip. WorktreeError when the bundle does not verify, lacks the branch, fails
    fsck, or holds a history that does not descend from ``base``."""
    repo = Path(repo).expanduser().resolve()
    ref = f"refs/heads/{branch}"
    staging = f"refs/flower-import/{branch}"
    r = _open(repo)
    try:
        try:
            r.git.bundle("verify", "--quiet", str(bundle), kill_after_timeout=GIT_TIMEOUT_S)
            heads = r.git.bundle("list-heads", str(bundle), ref, kill_after_timeout=GIT_TIMEOUT_S)
        except GitCommandError as e:
            raise _fail("the run's work bundle does not verify", e) from None
        if not heads.strip():
            raise WorktreeError(f"the run's work bundle has no {ref}")
        try:
            r.git.fetch("--quiet", "--no-write-fetch-head", "--no-tags", "--no-recurse-submodules",
                        str(bundle), f"+{ref}:{staging}", kill_after_timeout=GIT_TIMEOUT_S)
            tip = r.git.rev_parse("--verify", f"{staging}^{{commit}}").strip()
        except GitCommandError as e:
            raise _fail("git refused the run's work bundle", e) from None
        try:
            r.git.merge_base("--is-ancestor", base, tip)
        except GitCommandError:
            raise WorktreeError(f"the run's work ({tip[:12]}) does not descend from its base {base[:12]}: not taken") \
                from None
        r.git.update_ref(ref, tip)
        return tip
    finally:
        try:
            r.git.update_ref("-d", staging)
        except GitCommandError:
            pass
        r.close()


def diff(repo: str | Path, branch: str, *, base: str) -> str:
    """What the run changed on ``branch`` since ``base`` (binary-safe), from the team's repository only."""
    repo = Path(repo).expanduser().resolve()
    r = _open(repo)
    try:
        try:
            mb = r.git.merge_base(base, branch).strip()
            return r.git.diff(*_DIFF, mb, branch, "--", stdout_as_string=True, strip_newline_in_stdout=False)
        except GitCommandError as e:
            raise _fail(f"git could not diff {base!r}...{branch!r} in {repo}", e) from None
    finally:
        r.close()
