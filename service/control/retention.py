"""What an ended run leaves on disk, how much, and taking it away.

A run's folder (checkout, workbench, sessions, events, mailbox) is ~2 MB and more with its work; it stays
after the run so its events and manifest can be read, until the tenant deletes the run or it is older
than ``retain_days``. Only ended runs are ever touched here; the registry row stays as a tombstone and
the branch ``flower/<run>`` stays unless asked for (it is the team's work).

``Retention`` is the scheduler's part that does it: ``delete`` one ended run, ``sweep`` the old ones, and
``check_disk`` — a live run's folder measured every ``DISK_EVERY_S`` and the run stopped past
``max_run_disk_mb``.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import stat
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from sandbox.layout import RunLayout

from ..clock import SYSTEM, Clock
from ..logging import get_logger
from .live import LiveRun, layout_of, one_line

if TYPE_CHECKING:
    from ..config import ServiceConfig
    from .harvest import Harvest
    from ..registry import Run, RunsTable

__all__ = ["folder_bytes", "remove_run_files", "MAX_ENTRIES", "Retention", "DISK_EVERY_S", "SWEEP_EVERY_S"]

log = get_logger("flower.service.scheduler")

DISK_EVERY_S = 10.0  # how often a running run's folder is measured
SWEEP_EVERY_S = 300.0  # how often ended runs older than retain_days are looked for

MAX_ENTRIES = 200_000  # a folder with more entries is measured as far as this (a lower bound)


def folder_bytes(path: Path, *, most: int = MAX_ENTRIES) -> int:
    """Bytes the folder takes on disk (allocated blocks: a sparse file counts what it really uses); symlinks
    are not followed, other filesystems are not entered. 0 when it does not exist."""
    try:
        root_dev = os.lstat(path).st_dev
    except OSError:
        return 0
    total, seen, stack = 0, 0, [str(path)]
    while stack and seen < most:
        try:
            it = os.scandir(stack.pop())
        except OSError:
            continue
        with it:
            for entry in it:
                seen += 1
                try:
                    st = entry.stat(follow_symlinks=False)
                except OSError:
                    continue
                total += st.st_blocks * 512
                if stat.S_ISDIR(st.st_mode) and st.st_dev == root_dev:
                    stack.append(entry.path)
                if seen >= most:
                    break
    return total


def remove_run_files(layout: RunLayout) -> list[str]:
    """Blocking: remove the run's folder (symlinks inside are removed, never followed); what could not be
    removed, as sentences (e.g. files a container wrote as another uid)."""
    errors: list[str] = []

    def note(_fn: object, p: str, info: tuple[type[BaseException], BaseException, object]) -> None:
        exc = info[1]
        if not isinstance(exc, FileNotFoundError) and len(errors) < 5:
            errors.append(f"{Path(p).relative_to(layout.dir) if p.startswith(str(layout.dir)) else p}: "
                          f"{getattr(exc, 'strerror', None) or exc}")

    if layout.dir.is_symlink():
        layout.dir.unlink()
    elif layout.dir.exists():
        shutil.rmtree(layout.dir, onerror=note)
    return errors


class Retention:
    def __init__(self, config: ServiceConfig, runs: RunsTable, harvest: Harvest, *,
                 is_live: Callable[[str], bool], clock: Clock = SYSTEM) -> None:
        self.config = config
        self.runs = runs
        self.harvest = harvest
        self._is_live = is_live
        self.clock = clock  # wall time of retention (a test moves it on by days)
        self._next_sweep = 0.0

    def layout(self, run: Run) -> RunLayout:
        return layout_of(self.config.runs_root, run)

    async def delete(self, run: Run, *, branch: bool) -> Run:
        """Remove an ended run's folder (and its branch when asked); its row stays, marked deleted. A run that
        is not ended is never touched (ValueError)."""
        current = self.runs.get(run.id)
        if current is None or not current.terminal or self._is_live(current.id):
            raise ValueError(f"run {run.id} has not ended: nothing of a live run is removed")
        notes = await asyncio.to_thread(remove_run_files, self.layout(current))
        files_gone, dropped = not notes, False
        if branch and current.branch:
            try:
                await asyncio.to_thread(self.harvest.discard_workspace, current, keep_branch=False, strict=True)
                dropped = True
            except Exception as e:  # noqa: BLE001 - the files are gone either way; say what stayed
                notes.append(f"the branch {current.branch} stayed: {one_line(e, 200)}")
        if notes:
            log.warning("run.delete_incomplete", tenant=current.tenant, run=current.id, left=notes)
        done = self.runs.record_deleted(current.id, at=self.clock.now() if current.deleted is None else None,
                                            files_gone=files_gone, branch_dropped=dropped)
        return done or current

    async def sweep(self) -> list[str]:
        """Delete the files of runs that ended more than ``retain_days`` ago (their branches stay)."""
        if not self.config.retain_days:
            return []
        cutoff = self.clock.now() - self.config.retain_days * 86400
        gone = []
        for run in self.runs.list(ended_before=cutoff, deleted=False, oldest_first=True):
            if run.terminal:
                await self.delete(run, branch=False)
                gone.append(run.id)
        if gone:
            log.info("runs.retention", deleted=len(gone), retain_days=self.config.retain_days)
        return gone

    async def sweep_due(self) -> None:
        """A pass's share: a sweep every ``SWEEP_EVERY_S`` when ``retain_days`` is set."""
        if self.config.retain_days and self.clock.now() >= self._next_sweep:
            self._next_sweep = self.clock.now() + SWEEP_EVERY_S
            await self.sweep()

    async def check_disk(self, run: Run, live: LiveRun) -> None:
        """Every ``DISK_EVERY_S``: measure the run's folder, store it, and stop a run past ``max_run_disk_mb``."""
        now = self.clock.monotonic()
        if now - live.measured_at < DISK_EVERY_S:
            return
        live.measured_at = now
        used = await asyncio.to_thread(folder_bytes, self.layout(run).dir)
        self.runs.under(live.lease).record_disk(run.id, used)
        run.disk_bytes = used
        limit = int(self.config.max_run_disk_mb * 1024 * 1024)
        if limit and used > limit and "disk" not in live.stops:
            live.stops["disk"] = (f"the run used {used / (1024 * 1024):.1f} MB of disk, more than the "
                                  f"{self.config.max_run_disk_mb:g} MB a run may use (max_run_disk_mb)")
            log.warning("run.over_disk", tenant=run.tenant, run=run.id, disk_bytes=used, limit=limit)
