"""The judge runs the team's checks: the run's verify command (``RunSpec.verify``, the ask's or the tenant's:
``npm test``, ``pytest -q``, ``go test ./...``) runs after every round of work, before the judge, in a fresh copy of
the run's worktree; its exit code and output's tail are the round's ``Evidence`` (``flower.workflow.goal``): the
judge reads them, the verdict carries them, and while the command fails the round is not achieved.

Why a copy: nothing the agent left running (a watcher, a server, a subagent in the background) can change the files
while the check reads them, and nothing the check writes (caches, build output, a test database) lands in the work.
The copy is the worktree as it is now — tracked, untracked and ignored files alike, so what a setup installed there
(``node_modules``, ``.venv``) comes along — and its ``.git`` too: checks that ask git (a version from setuptools-scm,
``git ls-files`` in a linter, ``git diff --exit-code`` after a generator) see the run's repository, and a run's
``.git`` is small (its objects are borrowed, ``sandbox.worktree``). Symlinks are copied as symlinks; FIFOs, sockets
and devices are left out (a check needs none, and reading a FIFO would hang). The copy lives under the workbench
(the run's disk, outside the worktree) rather than ``/tmp``, a container's small tmpfs that a ``node_modules`` would
overflow, and is removed afterwards.

The command runs as ``sh -c`` in the copy, in a process group of its own (all of it is killed at the timeout, and
whatever it left behind when it ends), with the run's environment less the model's credentials and stdin closed.
Its output (stdout and stderr, interleaved) is read as it comes and only the last ``TAIL_BYTES`` are kept; the tail
shown is at most ``TAIL_LINES`` lines, cleaned of terminal control sequences.

The check runs inside the sandbox, on what the agent delivered: it is evidence against a judge that was talked
into a yes, not against an agent that rewrote the tests (the diff shows that, and the judge reads it).
"""

from __future__ import annotations

import asyncio
import inspect
import os
import select
import shutil
import signal
import stat
import subprocess
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path

from flower.cli.terminal import clean
from flower.core.credentials import TOKEN_KEYS
from flower.core.events import Event
from flower.core.runtime import StepResult
from flower.workflow.base import Ctx, Step
from flower.workflow.goal import EVIDENCE_KEY, Evidence

__all__ = ["Check", "verify", "verified", "run_check", "copy_worktree", "still_there", "tail_of", "VERIFY_TIMEOUT_S",
           "TAIL_BYTES", "TAIL_LINES", "EVENT"]

VERIFY_TIMEOUT_S = 600.0
TAIL_BYTES = 8 * 1024
TAIL_LINES = 60
EVENT = "verify"
"""The kind of the event each check writes (text: its summary; payload: ``Check.payload()``)."""
_KEEP = 4 * TAIL_BYTES  # raw bytes kept while reading: enough for the cleaned tail whatever the escapes took
_CUT = "…\n"  # what opens a tail that left something out
_DRAIN = 1024 * 1024  # bytes still read once the shell has ended (what it wrote last is in the pipe already)


@dataclass(frozen=True)
class Check:
    """One run of the verify command: ``exit_code`` None when it timed out or could not run (``error`` says why)."""

    cmd: str
    exit_code: int | None
    tail: str = ""
    timed_out: bool = False
    seconds: float = 0.0
    """How long the command ran."""
    error: str = ""
    copy_s: float = 0.0
    """How long the worktree took to copy."""

    @property
    def passed(self) -> bool:
        return self.exit_code == 0

    def summary(self) -> str:
        head = f"verify `{self.cmd}`"
        if self.error:
            return f"{head} could not run: {self.error}"
        if self.timed_out:
            return f"{head} timed out after {self.seconds:.0f} s (stopped)"
        if self.exit_code is not None and self.exit_code < 0:
            return f"{head} was killed by signal {-self.exit_code}"
        return f"{head} exited {self.exit_code}"

    def evidence(self) -> Evidence:
        return Evidence(self.summary(), self.tail, self.passed)

    def payload(self) -> dict[str, object]:
        return {"cmd": self.cmd, "exit_code": self.exit_code, "passed": self.passed, "timed_out": self.timed_out,
                "seconds": round(self.seconds, 2), "copy_s": round(self.copy_s, 2), "tail": self.tail,
                "error": self.error}


def tail_of(raw: bytes, *, max_bytes: int = TAIL_BYTES, max_lines: int = TAIL_LINES) -> str:
    """The end of ``raw``, safe for a terminal or a prompt: its last ``max_lines`` lines, at most ``max_bytes`` bytes
    of UTF-8 in all, cut on a character; a first line ``…`` when something was left out."""
    text = clean(raw.decode("utf-8", "replace")).rstrip("\n")
    lines = text.split("\n")
    cut = len(lines) > max_lines
    text = "\n".join(lines[-max_lines:])
    data, room = text.encode("utf-8"), max_bytes - len(_CUT.encode("utf-8"))
    if len(data) > max_bytes or (cut and len(data) > room):
        text, cut = data[-room:].decode("utf-8", "ignore"), True
    return _CUT + text if cut else text


def copy_worktree(worktree: Path, into: Path) -> Path:
    """``<into>/<worktree's name>``: every directory, regular file and symlink of ``worktree`` (``.git`` included but
    its ``*.lock`` files), modes and times kept; FIFOs, sockets and devices left out. What vanishes while it is copied
    (the run's checkpoint commits meanwhile: its ``index.lock`` comes and goes) is not there now and is not missed.
    OSError (``shutil.Error``) when anything else could not be copied: a check on part of the work is no check."""

    def left_out(folder: str, names: list[str]) -> set[str]:
        in_git = os.path.relpath(folder, worktree).split(os.sep)[0] == ".git"
        left = set()
        for name in names:
            try:
                mode = os.lstat(os.path.join(folder, name)).st_mode
            except OSError:
                continue  # gone meanwhile: the copy says so if it matters
            plain = stat.S_ISDIR(mode) or stat.S_ISREG(mode) or stat.S_ISLNK(mode)
            if not plain or (in_git and name.endswith(".lock")):
                left.add(name)
        return left

    dest = into / worktree.name
    try:
        shutil.copytree(worktree, dest, symlinks=True, ignore=left_out)
    except shutil.Error as e:
        missed = still_there(e.args[0])
        if missed:
            raise shutil.Error(missed) from None
    return dest


def still_there(errors: list[tuple[str, str, str]]) -> list[tuple[str, str, str]]:
    """The copy's errors (``(source, destination, why)``) whose source still exists: the others vanished meanwhile."""
    return [err for err in errors if os.path.lexists(err[0])]


def _env() -> dict[str, str]:
    """The run's environment without the model's credentials: a team's tests have no use for the run's token."""
    return {k: v for k, v in os.environ.items() if k not in TOKEN_KEYS and k != "FLOWER_ENV"}


def _exit_fd(pid: int) -> list[int]:
    """A pidfd of ``pid`` (readable once it has ended), where the kernel has them; else nothing (a second's poll)."""
    try:
        return [os.pidfd_open(pid)]
    except (AttributeError, OSError):
        return []


def run_check(cmd: str, cwd: Path, *, timeout_s: float = VERIFY_TIMEOUT_S, env: dict[str, str] | None = None) -> Check:
    """Blocking: ``sh -c cmd`` in ``cwd`` until it ends or ``timeout_s`` passes (then its whole group is killed)."""
    t0 = time.monotonic()
    try:
        proc = subprocess.Popen(["sh", "-c", cmd], cwd=cwd, env=_env() if env is None else env,
                                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                start_new_session=True)
    except OSError as e:
        return Check(cmd, None, error=f"cannot start `sh` in {cwd}: {e.strerror or e}")
    assert proc.stdout is not None
    out, fd, timed_out, after = bytearray(), proc.stdout.fileno(), False, 0
    exit_fd = _exit_fd(proc.pid)  # the shell's end wakes the wait even while something it left holds the output
    watch = select.poll()  # not select(): the runner's descriptors may be numbered past FD_SETSIZE
    for each in (fd, *exit_fd):
        watch.register(each, select.POLLIN)
    try:
        while True:
            left = t0 + timeout_s - time.monotonic()
            if left <= 0:
                timed_out = True
                break
            ended = proc.poll() is not None
            ready = {each for each, _ in watch.poll(0 if ended else min(left, 1.0) * 1000)}
            if fd not in ready:
                if ended:  # the shell is gone and its output read; what it left running is killed below
                    break
                continue
            chunk = os.read(fd, 65536)
            if not chunk:  # every writer closed its end
                try:
                    proc.wait(max(0.0, t0 + timeout_s - time.monotonic()))
                except subprocess.TimeoutExpired:
                    timed_out = True
                break
            out += chunk
            del out[:-_KEEP]
            after += len(chunk) if ended else 0
            if after > _DRAIN:  # the shell has ended; something it left behind talks on: enough
                break
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        proc.wait()
        proc.stdout.close()
        for each in exit_fd:
            os.close(each)
    return Check(cmd, None if timed_out else proc.returncode, tail_of(bytes(out)), timed_out, time.monotonic() - t0)


def verify(cmd: str, worktree: Path, *, scratch: Path, timeout_s: float = VERIFY_TIMEOUT_S) -> Check:
    """Blocking: ``cmd`` in a fresh copy of ``worktree`` made under ``scratch`` (removed afterwards)."""
    scratch.mkdir(parents=True, exist_ok=True)
    folder = Path(tempfile.mkdtemp(prefix="verify-", dir=scratch))
    try:
        t0 = time.monotonic()
        try:
            copy = copy_worktree(worktree, folder)
        except OSError as e:
            why = " ".join(str(e).split())[:300]
            return Check(cmd, None, copy_s=time.monotonic() - t0,
                         error=f"the worktree could not be copied for the check ({why})")
        copied = time.monotonic() - t0
        return replace(run_check(cmd, copy, timeout_s=timeout_s), copy_s=copied)
    finally:
        _remove(folder)


def _remove(folder: Path) -> None:
    """The copy goes, even where the check took the write bit off its folders."""
    shutil.rmtree(folder, ignore_errors=True)
    if folder.exists():
        for here, dirs, _ in os.walk(folder):
            for name in dirs:
                try:
                    os.chmod(os.path.join(here, name), 0o700, follow_symlinks=False)
                except OSError:
                    pass
        shutil.rmtree(folder, ignore_errors=True)


def verified(step: Step, cmd: str, *, worktree: Path, scratch: Path, timeout_s: float = VERIFY_TIMEOUT_S) -> Step:
    """``step`` with ``cmd`` checked after each of its rounds: a ``verify`` event, then the step's own gate (the
    goal guard's judge) with the check as ``ctx[EVIDENCE_KEY]``. A step without a gate passes when the check does."""
    inner = step.gate

    async def gate(result: StepResult, ctx: Ctx) -> bool:
        check = await asyncio.to_thread(verify, cmd, worktree, scratch=scratch, timeout_s=timeout_s)
        emit = ctx.get("_on_event")
        if emit is not None:
            emit(Event(EVENT, check.summary(), payload=check.payload()))
        if inner is None:
            return check.passed
        ctx[EVIDENCE_KEY] = check.evidence()
        said = inner(result, ctx)
        return bool(await said if inspect.isawaitable(said) else said)

    return replace(step, gate=gate)
