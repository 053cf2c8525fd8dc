"""The Backend protocol: how the service starts, watches, stops and re-finds the process of a run.

A handle is an opaque string a backend gives back from ``start`` and understands in every other call;
the service stores it in its registry. ``live()`` is how a restarted service re-attaches: it finds the
runs still running (by container label, or by the process's marker for the local backend).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Protocol, runtime_checkable

from ..layout import RunLayout
from ..spec import RunSpec

__all__ = ["Backend", "BackendError", "STATES", "stopped_exit", "check_prepared"]

STATES = ("running", "exited", "missing")


class BackendError(RuntimeError):
    """A backend could not do what it was asked; the message says why and what to do."""


def check_prepared(layout: RunLayout, spec: RunSpec) -> Path:
    """What a container backend needs before it starts a run; returns the repo's common git dir to mount."""
    from ..worktree import WorktreeError, git_common_dir

    if spec.run_id != layout.run_id:
        raise BackendError(f"spec is for run {spec.run_id!r}, layout for {layout.run_id!r}")
    for need, what in ((layout.spec_file, "write the spec (sandbox.spec.write_spec)"),
                       (layout.env_file, "write the env file (sandbox.envfile.write_env_file)")):
        if not need.is_file():
            raise BackendError(f"{need} does not exist: {what} before starting the run")
    try:
        return git_common_dir(layout.workspace)
    except WorktreeError as e:
        raise BackendError(f"the run's workspace must be a git worktree (sandbox.worktree.add_worktree): {e}") \
            from None


@runtime_checkable
class Backend(Protocol):
    def start(self, layout: RunLayout, spec: RunSpec, *, network: str | None = None) -> str:
        """Start the run whose spec is already written at ``layout.spec_file``; returns its handle."""
        ...

    def state(self, handle: str) -> str:
        """"running", "exited" or "missing" (unknown handle, or removed)."""
        ...

    def exit_code(self, handle: str) -> int | None:
        """The process's exit code once it exited, else None."""
        ...

    def stop(self, handle: str, timeout: float = 10) -> None:
        """SIGTERM, then after ``timeout`` seconds SIGKILL; exit.json says "killed" afterwards."""
        ...

    def live(self) -> dict[str, str]:
        """``{run_id: handle}`` of every run of this backend still running."""
        ...

    def remove(self, handle: str) -> None:
        """Forget the run's process (a container is deleted); the run's folder is left alone."""
        ...


def stopped_exit(exit_file: Path, why: str) -> None:
    """After a stop: if the run could not write exit.json itself (killed before it could), write it."""
    if exit_file.exists():
        return
    from ..entrypoint import write_exit

    try:
        write_exit(exit_file, "killed", error=why)
    except OSError:
        pass


def read_exit(exit_file: Path) -> dict | None:
    try:
        return json.loads(exit_file.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
