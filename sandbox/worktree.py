"""A run's git checkout, and its work coming back as data (GitPython, on the service's side only).

The service never runs git where a run can write. So a run does not get a linked worktree of the team's
repository (whose ``.git`` file, config and hooks the run could rewrite): it gets a checkout of its own
(``make_workspace``: ``git init`` + the team's object store as a read-only *alternate*, branch
``flower/<run>`` at the base commit), commits inside its sandbox, and hands its commits back as a git
bundle (``sandbox.checkpoint``). The service copies that bundle out of the run's reach, verifies it and
fetches it into the team's repository with a trusted git dir and fsck on (``import_bundle``); diffs are
computed there, from trusted objects only (``diff_files``, ``diff_stream``, ``diff``).

A small bundle can hold a huge diff (git compresses a repetitive file a thousandfold), so the service never
holds a diff whole: ``diff_files`` lists the changed files from ``--numstat`` (bounded), and ``diff_stream``
measures the diff against a cap before the first byte goes out, then hands it on in chunks.

Every git command here runs with system and global config off, hooks and fsmonitor off, no external diff
or textconv drivers, and no terminal prompts.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import tempfile
import threading
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import IO

import git
import msgspec
from git.exc import GitCommandError, InvalidGitRepositoryError, NoSuchPathError

from .errors import BranchExists, DiffTooLarge, NotAGitRepo, WorktreeError

__all__ = ["make_workspace", "remove_workspace", "import_bundle", "diff", "diff_files", "diff_stream", "objects_dir",
           "delete_branch", "FileStat", "Changes", "NotAGitRepo", "BranchExists", "WorktreeError", "DiffTooLarge",
           "GIT_ENV", "SAFE_CONFIG", "MAX_DIFF_FILES", "checkout_ahead", "AHEAD_BRANCH", "head", "has_any", "top_level",
           "export_tree"]

SAFE_CONFIG = ["core.hooksPath=/dev/null", "core.fsmonitor=false", "core.untrackedCache=false",
               "transfer.fsckObjects=true", "fetch.fsckObjects=true", "receive.fsckObjects=true",
               "protocol.allow=never", "protocol.file.allow=always", "core.symlinks=true"]
GIT_ENV = {"GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull, "GIT_TERMINAL_PROMPT": "0",
           "GIT_ATTR_NOSYSTEM": "1"}
_DIFF = ("--binary", "--no-ext-diff", "--no-textconv")
GIT_TIMEOUT_S = 300  # a bundle that makes git work longer than this is refused
MAX_DIFF_FILES = 10_000  # files ``diff_files`` lists; past it the list says it was cut
_NUMSTAT_BYTES = 4 << 20  # and what it reads of git's --numstat at most
_HEAD = 1 << 20  # a diff this small is measured and sent in one read of git; a larger one is read twice
_CHUNK = 64 << 10


class FileStat(msgspec.Struct, frozen=True):
    """One changed file as ``git diff --numstat`` counts it: lines added and deleted (0 and 0 for a binary
    file). ``path`` is for people (UTF-8, undecodable bytes replaced); ``name`` is the path git knows."""
    path: str
    insertions: int
    deletions: int
    binary: bool
    name: bytes


class Changes(msgspec.Struct, frozen=True):
    """What a run's branch changed: the commit measured and the merge base it is diffed against (both fixed,
    so a later read of the same pair gives the same bytes), the files (the first ``MAX_DIFF_FILES``),
    and whether there were more."""
    commit: str
    merge_base: str
    files: list[FileStat]
    truncated: bool

    def find(self, path: str) -> FileStat | None:
        return next((f for f in self.files if f.path == path), None)


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


AHEAD_BRANCH = "flower-ahead"  # the branch of a checkout made before its run exists (``checkout_ahead``)


def _git(path: Path, *args: str, safe: bool = False) -> None:
    cfg = [a for c in [*SAFE_CONFIG, *([f"safe.directory={path}"] if safe else [])] for a in ("-c", c)]
    out = subprocess.run(["git", *cfg, "-C", str(path), *args], env={**os.environ, **GIT_ENV}, capture_output=True,
                         text=True)
    if out.returncode != 0:
        raise WorktreeError(f"git {args[0]} in the checkout {path} failed: {out.stderr.strip()[-300:]}")


def _new_checkout(path: Path, objects: Path, branch: str, sha: str) -> None:
    """A checkout of ``sha`` on ``branch`` at ``path`` with a git dir of its own, ``objects`` as its alternate."""
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    _git(path, "init", "-q", "--template=", f"--initial-branch={branch}")
    (path / ".git" / "objects" / "info").mkdir(parents=True, exist_ok=True)
    (path / ".git" / "objects" / "info" / "alternates").write_text(f"{objects}\n")
    _git(path, "update-ref", f"refs/heads/{branch}", sha)
    _git(path, "reset", "-q", "--hard", sha)


def checkout_ahead(objects: str | Path, path: str | Path) -> str:
    """A checkout of HEAD of the repository whose object store is ``objects`` (``objects_dir``) at the empty
    folder ``path``, made before any run exists (a warm sandbox's, ``sandbox.pool``): the CLI started there ahead
    finds the git checkout it will work in. ``make_workspace`` moves it to its run's branch and base at the
    claim. Returns the commit; nothing is left when it fails."""
    objects, path = Path(objects).resolve(), Path(path).expanduser().resolve()
    cfg = [a for c in SAFE_CONFIG for a in ("-c", c)]
    out = subprocess.run(["git", *cfg, f"--git-dir={objects.parent}", "rev-parse", "--verify", "--quiet",
                          "HEAD^{commit}"], env={**os.environ, **GIT_ENV}, capture_output=True, text=True)
    sha = out.stdout.strip()
    if out.returncode != 0 or not sha:
        raise WorktreeError(f"the repository of {objects} has no commit at HEAD to check out ahead")
    if path.exists() and (not path.is_dir() or any(path.iterdir())):
        raise WorktreeError(f"{path} already exists and is not an empty folder")
    try:
        _new_checkout(path, objects, AHEAD_BRANCH, sha)
    except BaseException:
        shutil.rmtree(path, ignore_errors=True)
        raise
    return sha


def _made_ahead(path: Path, objects: Path) -> bool:
    """``path`` holds a checkout ``checkout_ahead`` made of this repository (its branch, these objects)."""
    try:
        head = (path / ".git" / "HEAD").read_text()
        alternates = (path / ".git" / "objects" / "info" / "alternates").read_text()
    except OSError:
        return False
    return head.strip() == f"ref: refs/heads/{AHEAD_BRANCH}" and alternates.strip() == str(objects)


def make_workspace(repo: str | Path, path: str | Path, branch: str, *, base: str = "HEAD") -> str:
    """Create ``branch`` at ``base`` in ``repo`` and a checkout of it at ``path`` with a git dir of its own
    (the team's objects borrowed read-only); returns the base commit's sha. A checkout ``checkout_ahead`` made at
    ``path`` is moved to ``branch`` at ``base`` instead (before its run, nothing but flower's own code ran there).

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
        objects = objects_dir(repo)
        ahead = _made_ahead(path, objects)
        if not ahead and path.exists() and (not path.is_dir() or any(path.iterdir())):
            raise WorktreeError(f"{path} already exists and is not an empty folder")
        r.git.branch(branch, sha)
        made_branch = True
        if not ahead:
            _new_checkout(path, objects, branch, sha)
            return str(sha)
        # the slot's checkout may belong to the run's uid already (a container's): safe.directory for it alone
        _git(path, "update-ref", f"refs/heads/{branch}", sha, safe=True)
        _git(path, "symbolic-ref", "HEAD", f"refs/heads/{branch}", safe=True)
        _git(path, "reset", "-q", "--hard", sha, safe=True)
        _git(path, "update-ref", "-d", f"refs/heads/{AHEAD_BRANCH}", safe=True)
        return str(sha)
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
        return str(tip)
    finally:
        try:
            r.git.update_ref("-d", staging)
        except GitCommandError:
            pass
        r.close()


def diff(repo: str | Path, branch: str, *, base: str) -> str:
    """What the run changed on ``branch`` since ``base`` (binary-safe), from the team's repository only, as one
    string: for tests and the library's own small repositories. The service streams it (``diff_stream``)."""
    repo = Path(repo).expanduser().resolve()
    r = _open(repo)
    try:
        try:
            mb = r.git.merge_base(base, branch).strip()
            return str(r.git.diff(*_DIFF, mb, branch, "--", stdout_as_string=True, strip_newline_in_stdout=False))
        except GitCommandError as e:
            raise _fail(f"git could not diff {base!r}...{branch!r} in {repo}", e) from None
    finally:
        r.close()


def head(repo: str | Path) -> str:
    """The commit the repository's HEAD names now."""
    out = subprocess.run(_argv(Path(repo), "rev-parse", "--verify", "HEAD^{commit}"), env=_git_env(),
                         capture_output=True, text=True, timeout=GIT_TIMEOUT_S)
    if out.returncode != 0 or not out.stdout.strip():
        raise WorktreeError(f"the repository {repo} has no commit at HEAD")
    return str(out.stdout).strip()


def has_any(repo: str | Path, rev: str, paths: Sequence[str]) -> bool:
    """Whether the tree at ``rev`` holds any of ``paths`` (file or folder), without a checkout."""
    out = subprocess.run(_argv(Path(repo), "ls-tree", "--name-only", rev, "--", *paths), env=_git_env(),
                         capture_output=True, text=True, timeout=GIT_TIMEOUT_S)
    return out.returncode == 0 and bool(out.stdout.strip())


def top_level(repo: str | Path, rev: str) -> dict[str, str]:
    """The names at the top of ``rev``'s tree and the kind of each (``blob`` for a file or link, ``tree`` for a
    folder, ``commit`` for a submodule): where a repository keeps its lockfiles and its devcontainer."""
    out = subprocess.run(_argv(Path(repo), "ls-tree", "-z", rev), env=_git_env(), capture_output=True,
                         timeout=GIT_TIMEOUT_S)
    if out.returncode != 0:
        raise WorktreeError(f"the tree of {rev} in {repo} could not be listed: "
                            f"{out.stderr.decode('utf-8', 'replace').strip()[-300:]}")
    entries = (e.split(b"\t", 1) for e in out.stdout.split(b"\0") if b"\t" in e)
    return {os.fsdecode(name): meta.split(b" ")[1].decode() for meta, name in entries}


def export_tree(repo: str | Path, rev: str, into: str | Path, paths: Sequence[str] = ()) -> None:
    """The files of ``rev`` (only ``paths``, files or folders, when given) into the folder ``into``, streamed from
    ``git archive`` to ``tar`` (never held whole in memory); WorktreeError when either fails."""
    git = subprocess.Popen(_argv(Path(repo), "archive", "--format=tar", rev, *(("--", *paths) if paths else ())),
                           env=_git_env(), stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    try:
        untar = subprocess.run(["tar", "-x", "-C", str(into), "--no-same-owner"], stdin=git.stdout,
                               capture_output=True, timeout=GIT_TIMEOUT_S)
    finally:
        assert git.stdout is not None
        git.stdout.close()
        code = git.wait(timeout=60)
    if code != 0 or untar.returncode != 0:
        raise WorktreeError(f"the files of {rev} in {repo} could not be exported: "
                            f"{untar.stderr.decode('utf-8', 'replace').strip()[-300:] or f'git exited {code}'}")


def _argv(repo: Path, *args: str | bytes) -> list[str | bytes]:
    """git in the team's repository, as ``_open`` runs it; pathspecs are literal (a file named ``*`` is that file)."""
    return ["git", *[a for c in SAFE_CONFIG for a in ("-c", c)], "--literal-pathspecs", "-C", str(repo), *args]


def _git_env() -> dict[str, str]:
    return {**os.environ, **GIT_ENV}


def _why(err: IO[bytes], code: int | None) -> str:
    err.seek(0)
    text = err.read(2000).decode("utf-8", "replace").strip()
    return text or f"git exited with code {code}"


def diff_files(repo: str | Path, branch: str, *, base: str, limit: int = MAX_DIFF_FILES) -> Changes:
    """The files ``branch`` changed since its merge base with ``base`` (``git diff --numstat``, no rename
    pairing: a moved file is a deletion and an addition), read as git writes them: at most ``limit`` files and
    a few MB of git's output are held, never the diff itself."""
    repo = Path(repo).expanduser().resolve()
    r = _open(repo)
    try:
        mb = r.git.merge_base(base, branch).strip()
        tip = r.git.rev_parse("--verify", f"{branch}^{{commit}}").strip()
    except GitCommandError as e:
        raise _fail(f"git could not diff {base!r}...{branch!r} in {repo}", e) from None
    finally:
        r.close()
    files: list[FileStat] = []
    truncated = False
    with tempfile.TemporaryFile() as err, subprocess.Popen(
            _argv(repo, "diff", "--numstat", "-z", "--no-renames", "--no-ext-diff", "--no-textconv", mb, tip, "--"),
            stdout=subprocess.PIPE, stderr=err, stdin=subprocess.DEVNULL, env=_git_env(), bufsize=0) as proc:
        assert proc.stdout is not None
        timer = threading.Timer(GIT_TIMEOUT_S, proc.kill)
        timer.start()
        try:
            pending, read = b"", 0
            while chunk := proc.stdout.read(_CHUNK):  # unbuffered: what git has written so far
                read += len(chunk)
                *records, pending = (pending + chunk).split(b"\0")
                for record in records:
                    files.append(_file_stat(record))
                if len(files) > limit or read > _NUMSTAT_BYTES:
                    truncated = True
                    proc.kill()
                    break
            code = proc.wait()
        finally:
            timer.cancel()
        if not truncated and code != 0:
            raise WorktreeError(f"git could not list the files changed on {branch!r}: {_why(err, code)}")
    return Changes(commit=tip, merge_base=mb, files=files[:limit], truncated=truncated)


def _file_stat(record: bytes) -> FileStat:
    added, deleted, name = record.split(b"\t", 2)
    binary = added == b"-"
    return FileStat(path=name.decode("utf-8", "replace"), insertions=0 if binary else int(added),
                    deletions=0 if binary else int(deleted), binary=binary, name=name)


async def diff_stream(repo: str | Path, changes: Changes, *, cap: int, name: bytes | None = None
                      ) -> AsyncIterator[bytes]:
    """The diff of ``changes`` (one file's, given its ``name``), from the team's repository only, in chunks.

    It is measured first: DiffTooLarge when it is over ``cap`` bytes, before anything is sent (git is stopped
    as soon as it has written ``cap`` bytes; the service holds at most a MB of it). A diff that fits in one
    read is sent from that read; a larger one is read again from git, chunk by chunk, as the client takes it
    (the same two fixed commits give the same bytes). Should git fail after that first byte, the stream ends
    with a last line ``flower-diff-error: <why>``.
    """
    repo = Path(repo).expanduser().resolve()
    argv = _argv(repo, "diff", *_DIFF, changes.merge_base, changes.commit, "--", *([name] if name else []))
    head: list[bytes] = []
    size = 0
    with tempfile.TemporaryFile() as err:
        proc = await asyncio.create_subprocess_exec(*argv, stdout=asyncio.subprocess.PIPE, stderr=err,
                                                    stdin=asyncio.subprocess.DEVNULL, env=_git_env())
        assert proc.stdout is not None
        try:
            async with asyncio.timeout(GIT_TIMEOUT_S):
                while chunk := await proc.stdout.read(_CHUNK):
                    size += len(chunk)
                    if size > cap:
                        raise DiffTooLarge(f"the diff is larger than {cap} bytes")
                    if size <= _HEAD:
                        head.append(chunk)
                code = await proc.wait()
        except TimeoutError:
            raise WorktreeError(f"git took longer than {GIT_TIMEOUT_S} s to diff the run's work") from None
        finally:
            await _end(proc)
        if code != 0:
            raise WorktreeError(f"git could not diff the run's work: {_why(err, code)}")
    if size <= _HEAD:
        return _sent(head)
    return _streamed(argv, cap)


async def _sent(chunks: list[bytes]) -> AsyncIterator[bytes]:
    for chunk in chunks:
        yield chunk


async def _streamed(argv: list[str | bytes], cap: int) -> AsyncIterator[bytes]:
    with tempfile.TemporaryFile() as err:
        proc = await asyncio.create_subprocess_exec(*argv, stdout=asyncio.subprocess.PIPE, stderr=err,
                                                    stdin=asyncio.subprocess.DEVNULL, env=_git_env())
        assert proc.stdout is not None
        sent = 0
        try:
            while chunk := await proc.stdout.read(_CHUNK):
                sent += len(chunk)
                if sent > cap:  # it measured under the cap a moment ago: git is not giving the same bytes
                    yield b"\nflower-diff-error: the diff grew past its cap while it was sent\n"
                    return
                yield chunk
            code = await proc.wait()
            if code != 0:
                yield f"\nflower-diff-error: {' '.join(_why(err, code).split())}\n".encode()
        finally:
            await _end(proc)


async def _end(proc: asyncio.subprocess.Process) -> None:
    if proc.returncode is None:
        proc.kill()
        await proc.wait()
