"""LocalBackend: a run as a subprocess of this machine (development and tests without Docker).

No isolation beyond a clean environment — PATH, HOME (the run's own ``home/``), FLOWER_ENV and the
spec's non-secret extras, never the service's environment wholesale. The process gets its own session
(process group), so ``stop`` can end everything the run started. A handle is
``local:<pid>:<start time>:<run folder>``; ``live()`` re-finds runs by the ``FLOWER_RUN_ID`` marker in the
environment of ``python -m sandbox.entrypoint`` processes, so a restarted service re-attaches.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from ..layout import RunLayout
from ..spec import RunSpec
from .base import RUN_MARK, BackendError, check_spec, read_exit, run_env, stopped_exit

__all__ = ["LocalBackend"]

DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def _stat(pid: int) -> tuple[str, int] | None:
    """(state letter, start time in ticks) of a live pid, else None."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = raw[raw.rindex(")") + 2:].split()
    return fields[0], int(fields[19])


def _parse(handle: str) -> tuple[int, int, Path]:
    try:
        kind, pid, start, folder = handle.split(":", 3)
        if kind != "local":
            raise ValueError
        return int(pid), int(start), Path(folder)
    except ValueError:
        raise BackendError(f"{handle!r} is not a local backend handle") from None


class LocalBackend:
    """Runs ``<python> -m sandbox.entrypoint <spec>`` as a subprocess; ``root`` limits ``live()`` to one runs folder."""

    def __init__(self, *, python: str | None = None, root: str | Path | None = None, path: str | None = None) -> None:
        self.python = python or sys.executable
        self.root = Path(root).resolve() if root else None
        self.path = path or os.environ.get("PATH") or DEFAULT_PATH
        self._procs: dict[int, subprocess.Popen[bytes]] = {}
        self._removed: set[str] = set()

    # -- the protocol ------------------------------------------------------
    def start(self, layout: RunLayout, spec: RunSpec, *, network: str | None = None) -> str:
        if network is not None:
            raise BackendError("the local backend cannot put a run on a network (it shares the host's): "
                               "use the Docker backend for network isolation, or pass network=None")
        check_spec(layout, spec)
        running = self.live().get(layout.run_id)
        if running:
            raise BackendError(f"run {layout.run_id} is already running ({running})")
        layout.ensure()
        layout.exit_file.unlink(missing_ok=True)
        env = {"PATH": self.path, **run_env(layout, spec, str(layout.env_file))}
        with open(layout.log, "ab") as out:
            proc = subprocess.Popen([self.python, "-m", "sandbox.entrypoint", str(layout.spec_file)],
                                    cwd=layout.dir, env=env, stdin=subprocess.DEVNULL, stdout=out,
                                    stderr=subprocess.STDOUT, start_new_session=True)
        self._procs[proc.pid] = proc
        st = _stat(proc.pid)
        return f"local:{proc.pid}:{st[1] if st else 0}:{layout.dir}"

    def state(self, handle: str) -> str:
        if handle in self._removed:
            return "missing"
        pid, start, folder = _parse(handle)
        if self._alive(pid, start):
            return "running"
        return "exited" if folder.is_dir() else "missing"

    def exit_code(self, handle: str) -> int | None:
        pid, start, folder = _parse(handle)
        if handle in self._removed or self._alive(pid, start):
            return None
        proc = self._procs.get(pid)
        if proc is not None and proc.returncode is not None:
            return proc.returncode if proc.returncode >= 0 else 128 - proc.returncode
        data = read_exit(folder / "exit.json")
        code = data.get("exit_code") if data else None
        return code if isinstance(code, int) else None

    def stop(self, handle: str, timeout: float = 10) -> None:
        pid, start, folder = _parse(handle)
        verified = self._alive(pid, start)  # the group is this run's: safe to kill after its leader is gone
        if verified:
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            deadline = time.monotonic() + timeout
            while self._alive(pid, start) and time.monotonic() < deadline:
                time.sleep(0.05)
        self._kill_group(pid, start, verified=verified)
        stopped_exit(folder, timeout)

    def live(self) -> dict[str, str]:
        out: dict[str, str] = {}
        for proc in list(self._procs.values()):
            proc.poll()  # reap our own children
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                cmd = [a for a in (entry / "cmdline").read_bytes().split(b"\0") if a]
                at = cmd.index(b"sandbox.entrypoint") if b"sandbox.entrypoint" in cmd else -1
                if at < 1 or cmd[at - 1] != b"-m" or at + 1 >= len(cmd):
                    continue
                raw = (entry / "environ").read_bytes().split(b"\0")
                env = dict(item.split(b"=", 1) for item in raw if b"=" in item)
            except OSError:
                continue
            run_id = env.get(RUN_MARK.encode())
            pid = int(entry.name)
            st = _stat(pid)
            if not run_id or st is None or st[0] == "Z":
                continue
            folder = Path(os.fsdecode(cmd[at + 1])).parent
            if self.root is not None and folder.parent != self.root:
                continue
            out[run_id.decode()] = f"local:{pid}:{st[1]}:{folder}"
        return out

    def remove(self, handle: str) -> None:
        pid, start, _ = _parse(handle)
        self._kill_group(pid, start, force=True)
        self._procs.pop(pid, None)
        self._removed.add(handle)

    # -- extras --------------------------------------------------------------
    def logs(self, handle: str) -> str:
        """What the run's process printed (its output.log)."""
        _, _, folder = _parse(handle)
        try:
            return (folder / "output.log").read_text(encoding="utf-8", errors="replace")
        except OSError:
            return ""

    def wait(self, handle: str, timeout: float | None = None) -> int | None:
        """Block until the run's process ends (or ``timeout``); its exit code."""
        pid, start, _ = _parse(handle)
        deadline = None if timeout is None else time.monotonic() + timeout
        while self._alive(pid, start):
            if deadline is not None and time.monotonic() >= deadline:
                return None
            time.sleep(0.05)
        return self.exit_code(handle)

    # -- internals -----------------------------------------------------------
    def _alive(self, pid: int, start: int) -> bool:
        proc = self._procs.get(pid)
        if proc is not None:
            return proc.poll() is None
        st = _stat(pid)
        return st is not None and st[0] != "Z" and (start == 0 or st[1] == start)

    def _kill_group(self, pid: int, start: int, *, force: bool = False, verified: bool = False) -> None:
        """SIGKILL the run's process group (the CLI and what it started), once its leader is gone or if ``force``.

        Only for a group this backend can vouch for: its own child, or a live process with the handle's start
        time (a re-attached run whose leader is gone may have had its pid reused).
        """
        if not (verified or pid in self._procs or self._alive(pid, start)):
            return
        if force and self._alive(pid, start):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        try:
            os.killpg(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        proc = self._procs.get(pid)
        if proc is not None:
            try:
                proc.wait(5)
            except subprocess.TimeoutExpired:
                pass
