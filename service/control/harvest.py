"""Taking a run's work home: its bundle copied out of its reach, verified and fetched into ``flower/<run>``;
the diff measured; its credentials and checkout removed.

Git runs only in the tenant's own repository, on a copy of the bundle the run can no longer touch
(``sandbox.worktree.import_bundle``); a bad bundle is the run's failure, a full disk the machine's (the bundle is
taken again on a later pass).
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sandbox.layout import RunLayout

from ..config import ServiceConfig
from ..logging import get_logger
from ..registry import Run, RunsTable
from .health import is_disk_full
from .live import LiveRun, layout_of, one_line

if TYPE_CHECKING:
    from sandbox.worktree import Changes

__all__ = ["Harvest", "Collected", "diffstat", "RUN_DIFFSTAT_FILES"]

log = get_logger("flower.service.scheduler")
audit_log = get_logger("flower.audit")

RUN_DIFFSTAT_FILES = 1_000  # files a run's row lists (GET /v1/runs/{id}/diff/files has them all)
BUNDLE = "outbox/work.bundle"


def diffstat(changes: Changes) -> dict[str, Any]:
    """What the run changed, as its row keeps it: {files: [{path, insertions, deletions, binary}], insertions,
    deletions, truncated}, from ``git diff --numstat`` (never the diff itself: it may be huge)."""
    files = [{"path": f.path, "insertions": f.insertions, "deletions": f.deletions, "binary": f.binary}
             for f in changes.files[:RUN_DIFFSTAT_FILES]]
    return {"files": files, "insertions": sum(f.insertions for f in changes.files),
            "deletions": sum(f.deletions for f in changes.files),
            "truncated": changes.truncated or len(changes.files) > RUN_DIFFSTAT_FILES}


@dataclass(frozen=True)
class Collected:
    """What the end of a run took home: the branch's tip, the diff stat, and sentences for what went wrong."""

    commit: str | None
    stat: dict[str, Any] | None
    notes: list[str] = field(default_factory=list)


class Harvest:
    def __init__(self, config: ServiceConfig, runs: RunsTable) -> None:
        self.config = config
        self.runs = runs

    def collect(self, run: Run, layout: RunLayout, live: LiveRun) -> Collected:
        """Blocking: take the run's last bundle, measure the diff, remove its credentials and checkout."""
        from sandbox.worktree import diff_files

        notes: list[str] = []
        commit: str | None = None
        try:
            commit = self.take_work(run, layout, live, raise_errors=True)
        except Exception as e:  # noqa: BLE001
            notes.append(f"the run's work was not taken ({type(e).__name__}: {one_line(e, 300)})")
        stat = None
        if run.base:
            try:
                stat = diffstat(diff_files(run.repo, layout.branch, base=run.base))
            except Exception as e:  # noqa: BLE001
                notes.append(f"reading the diff failed ({type(e).__name__}: {one_line(e, 200)})")
        layout.env_file.unlink(missing_ok=True)
        if self.config.remove_worktree:
            self.discard_workspace(run, keep_branch=True)
        return Collected(commit, stat, notes)

    def take_work(self, run: Run, layout: RunLayout, live: LiveRun, *, raise_errors: bool = False) -> str | None:
        """Blocking: copy the run's work bundle out of its reach, verify it and fetch it into ``flower/<run>``;
        the branch's tip (None when the run handed nothing back). A bundle already taken is not taken again."""
        from sandbox.runfiles import copy_out, open_file
        from sandbox.worktree import import_bundle

        if not run.base:
            return None
        try:
            with open_file(layout.dir, BUNDLE) as fd:
                st = os.fstat(fd)
        except FileNotFoundError:
            return run.commit_sha
        except OSError as e:
            if raise_errors:
                raise
            log.warning("run.bundle_refused", tenant=run.tenant, run=run.id, error=one_line(e))
            return run.commit_sha
        stamp = (st.st_ino, st.st_size, st.st_mtime_ns)
        if live.bundle_stamp == stamp:
            return run.commit_sha
        limit = self.config.max_bundle_mb * 1024 * 1024
        copy = self._bundle_copy(run)
        try:
            try:
                copy_out(layout.dir, BUNDLE, copy, limit=limit)
            except OSError as e:  # the data dir is full: the work still goes home, through the system's temp dir
                if not is_disk_full(e):
                    raise
                copy.unlink(missing_ok=True)
                copy = self._bundle_copy(run, system=True)
                copy_out(layout.dir, BUNDLE, copy, limit=limit)
            tip = import_bundle(run.repo, copy, layout.branch, base=run.base)
        except Exception as e:  # noqa: BLE001 - a bad bundle is the run's failure, never the service's
            if is_disk_full(e):  # the machine's, not the run's: taken again on a later pass
                raise
            live.bundle_stamp = stamp
            audit_log.warning("audit.bundle_refused", tenant=run.tenant, run=run.id, error=one_line(e, 300))
            if raise_errors:
                raise
            return run.commit_sha
        finally:
            copy.unlink(missing_ok=True)
            if copy.parent.name.startswith("flower-bundle-"):
                copy.parent.rmdir()
        # may fail on a full disk: then the bundle is taken again
        self.runs.under(live.lease).record_commit(run.id, tip)
        live.bundle_stamp = stamp
        run.commit_sha = tip
        log.info("run.checkpoint", tenant=run.tenant, run=run.id, commit=tip)
        return tip

    def _bundle_copy(self, run: Run, *, system: bool = False) -> Path:
        """Where a bundle is copied before git reads it: out of the run's reach, on the data dir (or the system's
        temp dir when the data dir has no room left)."""
        if system:
            return Path(tempfile.mkdtemp(prefix="flower-bundle-")) / f"{run.id}.bundle"
        tmp = self.config.data_path / "tmp"
        tmp.mkdir(mode=0o700, exist_ok=True)
        return tmp / f"{run.id}.bundle"

    def discard_workspace(self, run: Run, *, keep_branch: bool, strict: bool = False) -> None:
        """Blocking: the run's checkout goes (and its branch, unless ``keep_branch``; ``strict`` raises when the
        branch cannot be removed, else it is logged)."""
        from sandbox.worktree import delete_branch, remove_workspace

        layout = layout_of(self.config.runs_root, run)
        remove_workspace(layout.workspace)
        if not keep_branch:
            try:
                delete_branch(run.repo, layout.branch)
            except Exception as e:  # noqa: BLE001
                if strict:
                    raise
                log.warning("run.branch_remove_failed", tenant=run.tenant, run=run.id, error=one_line(e))
