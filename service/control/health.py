"""What the service can and cannot do right now: free space on the data dir, whether the backend answers.

The data dir holds the registry, every run's folder and the copies of work bundles; when it fills, SQLite
answers "database or disk is full" and runs die mid-write. So free space is a resource with a floor
(``min_free_mb``): below it new submits are refused (507), queued runs wait, ``/healthz`` says ``degraded`` with
the reason, and ``/metrics`` says so. A run that ends on a full disk gets "disk full" as its reason.

The backend (Docker, Kubernetes) can go away too: while it does not answer, the scheduler cannot see its runs,
so it reports the backend down and waits instead of marking them failed.
"""

from __future__ import annotations

import errno
import os
from dataclasses import dataclass
from pathlib import Path

from sandbox.errors import BackendUnavailable

from ..clock import SYSTEM, Clock

__all__ = ["Health", "DiskState", "is_disk_full", "is_engine_down", "disk_full_reason"]

_DISK_FULL_TEXT = ("database or disk is full", "no space left on device", "enospc", "disk quota exceeded")


def is_disk_full(error: BaseException | str) -> bool:
    """An ENOSPC/EDQUOT, or SQLite's "database or disk is full", anywhere in the error or its causes."""
    seen = 0
    e: BaseException | str | None = error
    while e is not None and seen < 8:
        if isinstance(e, OSError) and e.errno in (errno.ENOSPC, errno.EDQUOT):
            return True
        if any(t in str(e).lower() for t in _DISK_FULL_TEXT):
            return True
        e = (e.__cause__ or e.__context__) if isinstance(e, BaseException) else None
        seen += 1
    return False


def is_engine_down(error: BaseException) -> bool:
    """The backend's engine does not answer (its socket is gone or refuses), as opposed to a run's own failure:
    each backend maps its engine's errors into ``BackendUnavailable`` inside itself."""
    return isinstance(error, BackendUnavailable)


@dataclass(frozen=True)
class DiskState:
    path: str
    free_bytes: int
    floor_bytes: int

    @property
    def low(self) -> bool:
        return self.free_bytes < self.floor_bytes

    def sentence(self) -> str:
        return (f"the data dir {self.path} has {_size(self.free_bytes)} free, below the floor of "
                f"{_size(self.floor_bytes)} (min_free_mb)")


def _size(n: int) -> str:
    return f"{n / 1024 / 1024:.1f} MB" if n >= 1024 * 1024 else f"{n / 1024:.0f} KB"


def disk_full_reason(disk: DiskState, branch: str | None, detail: str | None = None) -> str:
    where = f"what it had committed is kept on its branch {branch}" if branch else "it had committed nothing yet"
    how = f" — {detail}" if detail else ""
    return (f"disk full: the data dir {disk.path} ran out of space while this run was writing{how}; {where}; "
            "free space on the data dir and submit the ask again")


class Health:
    """Disk and backend state, read by the scheduler, ``/healthz`` and ``/metrics``."""

    def __init__(self, data_dir: Path, floor_mb: float, backend: str, *, every_s: float = 1.0,
                 clock: Clock = SYSTEM) -> None:
        self.clock = clock
        self.data_dir, self.floor_bytes, self.backend = data_dir, int(floor_mb * 1024 * 1024), backend
        self.every_s = every_s
        self._disk: DiskState | None = None
        self._disk_at = 0.0
        self.disk_low_since: float | None = None
        self.last_disk_full: float | None = None  # when a write on the data dir last failed for want of space
        self.last_low: float | None = None  # when free space was last seen below the floor
        self.backend_down_since: float | None = None
        self.backend_error: str | None = None
        self.scheduling = False
        """The scheduler's loop is running (started, and neither crashed nor stopped)."""

    # -- the disk ---------------------------------------------------------------------------
    def disk(self, *, fresh: bool = False) -> DiskState:
        now = self.clock.monotonic()
        if fresh or self._disk is None or now - self._disk_at >= self.every_s:
            st = os.statvfs(self.data_dir)
            self._disk = DiskState(str(self.data_dir), st.f_bavail * st.f_frsize, self.floor_bytes)
            self._disk_at = now
            if self._disk.low:
                self.last_low = self.clock.now()
                if self.disk_low_since is None:
                    self.disk_low_since = self.last_low
            elif not self._disk.low:
                self.disk_low_since = None
        return self._disk

    def disk_full_seen(self) -> None:
        self.last_disk_full = self.clock.now()
        self.disk(fresh=True)

    def disk_was_full(self, since: float) -> bool:
        """Did the data dir run out of space (or sit below its floor) at any time since ``since``?"""
        if self.disk().low:
            return True
        return any(t is not None and t >= since for t in (self.last_low, self.last_disk_full))

    # -- the backend ------------------------------------------------------------------------
    def backend_failed(self, error: BaseException) -> bool:
        """Record an engine that does not answer; True when it just went down."""
        self.backend_error = " ".join(str(error).split())[:300]
        if self.backend_down_since is None:
            self.backend_down_since = self.clock.now()
            return True
        return False

    def backend_ok(self) -> float | None:
        """The engine answers; how long it was down, when it was."""
        if self.backend_down_since is None:
            return None
        lasted = self.clock.now() - self.backend_down_since
        self.backend_down_since, self.backend_error = None, None
        return lasted

    @property
    def backend_up(self) -> bool:
        return self.backend_down_since is None

    # -- reporting --------------------------------------------------------------------------
    def reasons(self) -> list[str]:
        out = []
        disk = self.disk()
        if disk.low:
            out.append(f"disk low: {disk.sentence()}; new runs are refused and queued runs wait until space is freed")
        if not self.backend_up:
            out.append(f"backend down: the {self.backend} engine does not answer ({self.backend_error}); "
                       "live runs are not marked failed while it cannot see them, and are re-attached when it is back")
        return out

    def prometheus(self) -> str:
        """Prometheus text exposition of the same facts (gauges)."""
        disk = self.disk()
        lines = [
            "# HELP flower_degraded 1 while the service is degraded, by reason.",
            "# TYPE flower_degraded gauge",
            f'flower_degraded{{reason="disk_low"}} {int(disk.low)}',
            f'flower_degraded{{reason="backend_down"}} {int(not self.backend_up)}',
            "# HELP flower_data_free_bytes Free bytes on the data dir's file system.",
            "# TYPE flower_data_free_bytes gauge",
            f"flower_data_free_bytes {disk.free_bytes}",
            "# HELP flower_data_free_floor_bytes Below this, submits are refused and queued runs wait.",
            "# TYPE flower_data_free_floor_bytes gauge",
            f"flower_data_free_floor_bytes {disk.floor_bytes}",
            "# HELP flower_backend_up 1 while the backend's engine answers.",
            "# TYPE flower_backend_up gauge",
            f'flower_backend_up{{backend="{self.backend}"}} {int(self.backend_up)}',
        ]
        return "\n".join(lines) + "\n"
