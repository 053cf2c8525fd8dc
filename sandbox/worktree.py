"""Git worktrees for runs (GitPython): one branch and one checkout per run, the team's checkout untouched.

Every git command here runs with the repository's hooks and fsmonitor switched off
(``core.hooksPath=/dev/null``, ``core.fsmonitor=false``): a run's worktree was written by an agent,
and nothing in a repository may make the service execute code. ``commit_all(..., repo=)`` also checks
that the worktree still points into ``repo`` before git runs in it.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import git
from git.exc import GitCommandError, InvalidGitRepositoryError, NoSuchPathError

__all__ = ["add_worktree", "remove_worktree", "commit_all", "diff", "git_common_dir", "worktree_gitdir",
           "NotAGitRepo", "BranchExists", "WorktreeError", "AUTHOR"]

AUTHOR = ("flower", "flower@localhost")
_SAFE = ["core.hooksPath=/dev/null", "core.fsmonitor=false", "core.untrackedCache=false"]
_DIFF = ("--binary", "--no-ext-diff", "--no-textconv")  # no external diff drivers run for the service


class WorktreeError(RuntimeError):
    """A worktree operation that git refused; the message carries git's reason."""


class NotAGitRepo(ValueError):
    """The given path is not a git repository."""


class BranchExists(ValueError):
    """The branch a new worktree should create already exists."""


def _open(path: Path, *, safe_dir: Path | None = None) -> git.Repo:
    try:
        repo = git.Repo(path)
    except (InvalidGitRepositoryError, NoSuchPathError):
        raise NotAGitRepo(f"{path} is not a git repository: give the path of a clone (or run `git init` there)") \
            from None
    options = list(_SAFE)
    if safe_dir is not None:  # a worktree owned by the sandbox's uid: git would call it "dubious"
        options.append(f"safe.directory={safe_dir}")
    repo.git.set_persistent_git_options(c=options)
    return repo


def _fail(what: str, e: GitCommandError) -> WorktreeError:
    reason = (e.stderr or e.stdout or str(e)).strip().replace("stderr: ", "").strip("'\n ")
    return WorktreeError(f"{what}: {reason}")


def _env(name: str, email: str) -> dict[str, str]:
    return {"GIT_AUTHOR_NAME": name, "GIT_AUTHOR_EMAIL": email,
            "GIT_COMMITTER_NAME": name, "GIT_COMMITTER_EMAIL": email}


def add_worktree(repo: str | Path, path: str | Path, branch: str, *, base: str = "HEAD") -> None:
    """Check out a new branch ``branch`` from ``base`` into ``path`` (which must not exist or be empty).

    Raises NotAGitRepo when ``repo`` is not a git repository, BranchExists when ``branch`` does,
    WorktreeError for anything else git refuses (an unknown ``base``, a bad branch name …).
    """
    repo, path = Path(repo).expanduser().resolve(), Path(path).expanduser().resolve()
    r = _open(repo)
    try:
        try:
            if branch.startswith("-"):
                raise GitCommandError("check-ref-format", 1)
            r.git.check_ref_format("--branch", branch)
        except GitCommandError:
            raise WorktreeError(f"{branch!r} is not a valid branch name") from None
        if r.git.branch("--list", branch).strip():
            raise BranchExists(f"branch {branch!r} already exists in {repo}: a run needs a fresh branch "
                               f"(pick another run id, or delete the branch with `git branch -D {branch}`)")
        try:
            r.git.rev_parse("--verify", "--quiet", f"{base}^{{commit}}")
        except GitCommandError:
            raise WorktreeError(f"base {base!r} is not a commit in {repo}") from None
        if path.exists() and (not path.is_dir() or any(path.iterdir())):
            raise WorktreeError(f"{path} already exists and is not an empty folder")
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            r.git.worktree("add", "-b", branch, str(path), base)
        except GitCommandError as e:
            raise _fail(f"git could not add a worktree at {path}", e) from None
    finally:
        r.close()


def remove_worktree(repo: str | Path, path: str | Path, *, keep_branch: bool = True) -> None:
    """Remove the worktree at ``path`` (changes in it are discarded); its branch stays unless ``keep_branch=False``.

    A worktree whose folder is already gone is pruned; a path that is no worktree of ``repo`` is a WorktreeError.
    """
    repo, path = Path(repo).expanduser().resolve(), Path(path).expanduser().resolve()
    r = _open(repo)
    try:
        entry = next((w for w in _worktrees(r) if Path(w["worktree"]) == path), None)
        if entry is None:
            raise WorktreeError(f"{path} is not a worktree of {repo}")
        try:
            if path.exists():
                r.git.worktree("remove", "--force", "--force", str(path))
            else:
                r.git.worktree("prune")
        except GitCommandError as e:
            raise _fail(f"git could not remove the worktree {path}", e) from None
        branch = entry.get("branch", "").removeprefix("refs/heads/")
        if not keep_branch and branch:
            try:
                r.git.branch("-D", branch)
            except GitCommandError as e:
                raise _fail(f"git could not delete branch {branch}", e) from None
    finally:
        r.close()


def _worktrees(r: git.Repo) -> list[dict[str, str]]:
    out: list[dict[str, str]] = []
    for block in r.git.worktree("list", "--porcelain").split("\n\n"):
        entry: dict[str, str] = {}
        for line in block.splitlines():
            key, _, value = line.partition(" ")
            entry[key] = value
        if "worktree" in entry:
            out.append(entry)
    return out


def worktree_gitdir(path: str | Path) -> Path:
    """The worktree's private git folder (``<common>/worktrees/<name>``), from its ``.git`` file."""
    path = Path(path)
    dotgit = path / ".git"
    if not dotgit.is_file():
        raise WorktreeError(f"{path} is not a linked git worktree (its .git is not a file)")
    text = dotgit.read_text(encoding="utf-8", errors="replace").strip()
    if not text.startswith("gitdir:"):
        raise WorktreeError(f"{dotgit} does not name a gitdir")
    gitdir = Path(text.split(":", 1)[1].strip())
    return (gitdir if gitdir.is_absolute() else path / gitdir).resolve()


def git_common_dir(path: str | Path) -> Path:
    """The repository's own git folder (``.git`` of a clone, the folder of a bare repo) a worktree belongs to."""
    gitdir = worktree_gitdir(path)
    try:
        common = (gitdir / "commondir").read_text(encoding="utf-8").strip()
    except OSError:
        raise WorktreeError(f"{gitdir} has no commondir: not a linked worktree's git folder") from None
    return (gitdir / common).resolve()


def _check_belongs(path: Path, repo: Path) -> None:
    """Before git runs in ``path``: its .git must still point into ``repo`` and back (an agent could rewrite it)."""
    r = _open(repo)
    try:
        common = Path(r.git.rev_parse("--git-common-dir"))
        common = (common if common.is_absolute() else repo / common).resolve()
    finally:
        r.close()
    try:
        gitdir = worktree_gitdir(path)
        ok = (gitdir.parent == common / "worktrees" and git_common_dir(path) == common
              and Path((gitdir / "gitdir").read_text(encoding="utf-8").strip()).resolve() == (path / ".git").resolve())
    except (OSError, WorktreeError):
        ok = False
    if not ok:
        raise WorktreeError(f"{path} no longer points into {repo} (its .git was changed): refusing to run git there")


def commit_all(path: str | Path, message: str, *, repo: str | Path | None = None,
               author: tuple[str, str] = AUTHOR) -> str | None:
    """Commit everything the worktree at ``path`` changed (new, modified, deleted; .gitignore respected)
    onto its branch; returns the new commit's sha, or None when nothing changed.

    Pass ``repo`` (the repository the worktree was added from) when the worktree was written by a run:
    the worktree is then checked to still belong to it before any git command runs there.
    """
    path = Path(path).expanduser().resolve()
    if repo is not None:
        _check_belongs(path, Path(repo).expanduser().resolve())
    r = _open(path, safe_dir=path)
    try:
        try:
            r.git.add("-A", ".")
            if not r.git.status("--porcelain", "--untracked-files=no").strip():
                return None
            with r.git.custom_environment(**_env(*author)):
                r.git.commit("--no-verify", "--no-gpg-sign", "-q", "-m", message)
            return r.head.commit.hexsha
        except GitCommandError as e:
            raise _fail(f"git could not commit the changes in {path}", e) from None
    finally:
        r.close()


def diff(repo: str | Path, branch: str, *, base: str) -> str:
    """What the run changed on ``branch`` since it left ``base`` (``git diff base...branch``, binary-safe).

    When ``branch`` is checked out in a worktree that has changes not committed yet, those are included
    too (new files as well), without touching that worktree's index: committed or not, it is the run's work.
    """
    repo = Path(repo).expanduser().resolve()
    r = _open(repo)
    try:
        try:
            mb = r.git.merge_base(base, branch).strip()
        except GitCommandError as e:
            raise _fail(f"no common ancestor of {base!r} and {branch!r} in {repo}", e) from None
        where = next((Path(w["worktree"]) for w in _worktrees(r)
                      if w.get("branch") == f"refs/heads/{branch}" and Path(w["worktree"]) != repo), None)
        if where is None or not where.is_dir():
            try:
                return r.git.diff(*_DIFF, mb, branch, "--", stdout_as_string=True, strip_newline_in_stdout=False)
            except GitCommandError as e:
                raise _fail(f"git could not diff {base!r}...{branch!r}", e) from None
    finally:
        r.close()
    return _diff_with_worktree(where, mb)


def _diff_with_worktree(path: Path, mb: str) -> str:
    """``mb`` against everything in the worktree, through a throwaway index (the real one is not touched)."""
    r = _open(path, safe_dir=path)
    fd, index = tempfile.mkstemp(prefix="flower-index-")
    os.close(fd)
    os.unlink(index)  # git wants to create it
    try:
        with r.git.custom_environment(GIT_INDEX_FILE=index):
            r.git.read_tree("HEAD")
            r.git.add("-A", ".")
            return r.git.diff("--cached", *_DIFF, mb, "--", stdout_as_string=True, strip_newline_in_stdout=False)
    except GitCommandError as e:
        raise _fail(f"git could not diff the worktree {path}", e) from None
    finally:
        Path(index).unlink(missing_ok=True)
        r.close()
