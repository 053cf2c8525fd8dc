"""Who uses a SQLite registry: every process that opens it holds a shared flock on ``registry.lock`` beside it.

``restore`` swaps the file, so it must be alone with it: a process that has the old file open keeps writing to it
through its handle, and what it writes after the swap is lost. The kernel keeps the lock for exactly as long as the
process lives — a service killed with -9 holds nothing, so a dead process never blocks a restore, and no heartbeat
has to run out. ``alone`` takes the lock exclusively for the swap (a service starting meanwhile waits for it) or
says who holds it, read from ``/proc/locks`` and each holder's command line. A model gateway
alone is waited for a few seconds: stopped, the service leaves it to end by itself.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
from collections.abc import Iterator
from pathlib import Path

from ..errors import RegistryInUse, RegistryLocked

__all__ = ["LOCK_NAME", "hold", "alone", "holders"]

LOCK_NAME = "registry.lock"
RESTORE_WAIT_S = 30.0  # a service starting while a restore swaps the file waits this long for it
GATEWAY_WAIT_S = 10.0  # a restore waits this long for a gateway alone to end (it does within seconds, runs done)


def _lock_file(db_path: Path) -> int:
    return os.open(db_path.with_name(LOCK_NAME), os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)


def hold(db_path: Path, *, wait_s: float = RESTORE_WAIT_S) -> int:
    """The fd of a shared lock on the registry, held until it is closed; waits out a restore under way."""
    fd = _lock_file(db_path)
    deadline = time.monotonic() + wait_s
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            return fd
        except BlockingIOError:
            if time.monotonic() >= deadline:
                os.close(fd)
                raise RegistryLocked(f"a restore of the registry {db_path} has held it for {wait_s:.0f} s: start "
                                     f"once `python -m service restore` has finished", where=str(db_path),
                                     waited_s=wait_s) from None
            time.sleep(0.05)


@contextlib.contextmanager
def alone(db_path: Path, *, gateway_wait_s: float = GATEWAY_WAIT_S) -> Iterator[None]:
    """The registry to this process alone while the block runs; RegistryInUse naming who uses it otherwise. A
    model gateway alone is waited for a while: it ends by itself once its service is stopped and no run is active."""
    fd = _lock_file(db_path)
    deadline = time.monotonic() + gateway_wait_s
    try:
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                found = [(pid, _kind(pid)) for pid in _holders(fd)]
                if found and all(kind == "gateway" for _, kind in found) and time.monotonic() < deadline:
                    time.sleep(0.1)
                    continue
                said = [_phrase(pid, kind) for pid, kind in found] or [
                    "a process this machine cannot see (one in another container or host that shares the data dir?)"]
                raise RegistryInUse(f"the registry {db_path} is in use by {'; '.join(said)}: restoring it now would "
                                    f"lose what they write next; stop them, then run the restore again",
                                    where=str(db_path), users=said) from None
        yield
    finally:
        os.close(fd)


def holders(db_path: Path) -> list[str]:
    """Who has the registry at ``db_path`` open, one phrase per process saying how to stop it."""
    fd = _lock_file(db_path)
    try:
        return [_phrase(pid, _kind(pid)) for pid in _holders(fd)]
    finally:
        os.close(fd)


def _holders(fd: int) -> list[int]:
    """The pids holding a lock on the file open at ``fd`` (``/proc/locks``), this process left out."""
    st = os.fstat(fd)
    ident = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    pids: list[int] = []
    try:
        lines = Path("/proc/locks").read_text().splitlines()
    except OSError:
        return []
    for line in lines:
        parts = line.split()
        # "1: FLOCK  ADVISORY  READ 1234 fe:00:2147729 0 EOF" (a blocked waiter's line carries "->")
        if "->" in parts or len(parts) < 6 or parts[5] != ident:
            continue
        with contextlib.suppress(ValueError):
            pid = int(parts[4])
            if pid > 0 and pid != os.getpid() and pid not in pids:
                pids.append(pid)
    return pids


def _kind(pid: int) -> str:
    """Which of ours the process is, from its command line: gateway, service, backup, migrate — or other."""
    try:
        argv = [a.decode("utf-8", "replace") for a in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0") if a]
    except OSError:
        return "other"
    if "-m" not in argv or "service" not in argv:
        return "other"
    verbs = [a for a in argv[argv.index("service") + 1:] if a in ("gateway", "backup", "migrate", "restore")]
    return verbs[0] if verbs else "service"


def _phrase(pid: int, kind: str) -> str:
    """A holder in words, with how to stop it."""
    if kind == "gateway":
        return (f"the model gateway (pid {pid}; it ends by itself once the service is stopped and no run is "
                f"active, or stop it with `kill {pid}`)")
    if kind == "service":
        return f"the service (pid {pid}; stop it with `kill {pid}` or its service manager)"
    if kind != "other":
        return f"`python -m service {kind}` (pid {pid}; let it finish)"
    try:
        shown = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode("utf-8", "replace").strip()
    except OSError:
        shown = "?"
    return f"process {pid} ({shown[:80]}; stop it with `kill {pid}`)"
