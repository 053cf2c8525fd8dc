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

__all__ = ["Backend", "BackendError", "STATES", "stopped_exit", "check_spec", "check_prepared", "run_env",
           "ENV_IN_CONTAINER", "RUN_MARK"]

STATES = ("running", "exited", "missing")
ENV_IN_CONTAINER = "/run/flower/flower.env"  # where a container backend mounts the env file (FLOWER_ENV)
RUN_MARK = "FLOWER_RUN_ID"  # in every run's environment; the local backend re-finds its runs by it


class BackendError(RuntimeError):
    """A backend could not do what it was asked; the message says why and what to do."""


def check_spec(layout: RunLayout, spec: RunSpec) -> None:
    """What every backend needs before it starts a run: the layout's own spec, written."""
    if spec.run_id != layout.run_id:
        raise BackendError(f"spec is for run {spec.run_id!r}, layout for {layout.run_id!r}")
    if not layout.spec_file.is_file():
        raise BackendError(f"{layout.spec_file} does not exist: write the spec (sandbox.spec.write_spec) "
                           "before starting the run")


def check_prepared(layout: RunLayout, spec: RunSpec) -> Path:
    """What a container backend needs as well (the env file, the worktree); returns the repo's git dir to mount."""
    from ..worktree import WorktreeError, git_common_dir

    check_spec(layout, spec)
    if not layout.env_file.is_file():
        raise BackendError(f"{layout.env_file} does not exist: write the env file (sandbox.envfile.write_env_file) "
                           "before starting the run")
    try:
        return git_common_dir(layout.workspace)
    except WorktreeError as e:
        raise BackendError(f"the run's workspace must be a git worktree (sandbox.worktree.add_worktree): {e}") \
            from None


def run_env(layout: RunLayout, spec: RunSpec, env_file: str) -> dict[str, str]:
    """The environment of a run's process, the same in every backend: nothing of the service's own."""
    return {"FLOWER_ENV": env_file, "HOME": str(layout.home), "LANG": "C.UTF-8", "PYTHONUNBUFFERED": "1",
            RUN_MARK: layout.run_id, "FLOWER_TENANT": spec.tenant, **spec.env}


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


def stopped_exit(folder: Path, timeout: float) -> None:
    """After a stop: if the run in ``folder`` could not write exit.json itself (killed before it could), write it."""
    exit_file = folder / "exit.json"
    if exit_file.exists():
        return
    from ..entrypoint import write_exit

    try:
        write_exit(exit_file, "killed", error=f"stopped; the run did not end within {timeout:g}s and was killed")
    except OSError:
        pass


def read_exit(exit_file: Path) -> dict | None:
    """exit.json as a dict; None when it is missing, unreadable or not an object."""
    try:
        data = json.loads(exit_file.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None
