"""The Backend protocol: how the service starts, watches, stops and re-finds the process of a run.

A handle (``Handle``) is an opaque string a backend gives back from ``start`` and understands in every other
call; the service stores it in its registry. ``live()`` is how a restarted service re-attaches: it finds the
runs still running (by container label, or by the process's marker for the local backend).

A backend that can also start a sandbox before its run exists implements ``WarmBackend`` (``sandbox.pool``):
``warm`` starts one on a slot folder with nothing of any run in it, ``claim`` hands it a run (the spec, written
last, is what it waits for), ``slots`` lists the ones still waiting. One that can show a run's output and wait for
its end implements ``Inspectable`` (``logs``, ``wait``). Every error a backend raises is one of
``sandbox.errors``: an engine or API that does not answer is ``BackendUnavailable``, mapped inside the backend.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Literal, NewType, Protocol, runtime_checkable

from ..layout import RunLayout, valid_run_id
from ..spec import Egress, Prepared, RunSpec
from ..errors import BackendError, BackendUnavailable, RunExists

__all__ = ["Backend", "WarmBackend", "Inspectable", "Handle", "State", "BackendError", "BackendUnavailable",
           "RunExists", "STATES", "stopped_exit", "check_spec", "check_prepared",
           "run_env", "warm_env", "claim_slot", "claimed_run", "ENV_IN_CONTAINER", "RUN_MARK", "WARM_MARK"]

Handle = NewType("Handle", str)
"""What a backend gives back from ``start``/``warm`` and understands in every other call."""
State = Literal["running", "exited", "missing"]
STATES: tuple[State, ...] = ("running", "exited", "missing")
ENV_IN_CONTAINER = "/run/flower/flower.env"  # where a container backend mounts the env file (FLOWER_ENV)
RUN_MARK = "FLOWER_RUN_ID"  # in every run's environment; the local backend re-finds its runs by it
WARM_MARK = "FLOWER_WARM"  # in a warm sandbox's environment: its run is named by the spec it is handed


def check_spec(layout: RunLayout, spec: RunSpec) -> None:
    """What every backend needs before it starts a run: the layout's own spec, written."""
    if spec.run_id != layout.run_id:
        raise BackendError(f"spec is for run {spec.run_id!r}, layout for {layout.run_id!r}")
    if not layout.spec_file.is_file():
        raise BackendError(f"{layout.spec_file} does not exist: write the spec (sandbox.spec.write_spec) "
                           "before starting the run")


def check_prepared(layout: RunLayout, spec: RunSpec) -> Path | None:
    """What a sandboxing backend needs as well (the env file, the checkout); returns the team's object
    store to mount read-only (``spec.objects``), or None for a run without one."""
    check_spec(layout, spec)
    if not layout.env_file.is_file():
        raise BackendError(f"{layout.env_file} does not exist: write the env file (sandbox.envfile.write_env_file) "
                           "before starting the run")
    if not (layout.workspace / ".git").is_dir():
        raise BackendError(f"the run's workspace {layout.workspace} must be a checkout made by "
                           "sandbox.worktree.make_workspace before the run starts")
    if not spec.objects:
        return None
    objects = Path(spec.objects)
    if not objects.is_absolute() or not objects.is_dir():
        raise BackendError(f"the spec's objects folder {objects} is not a folder: write the spec with the path "
                           "sandbox.worktree.objects_dir gives")
    return objects


def run_env(layout: RunLayout, spec: RunSpec, env_file: str) -> dict[str, str]:
    """The environment of a run's process, the same in every backend: nothing of the service's own."""
    return {"FLOWER_ENV": env_file, "HOME": str(layout.home), "LANG": "C.UTF-8", "PYTHONUNBUFFERED": "1",
            RUN_MARK: layout.run_id, "FLOWER_TENANT": spec.tenant, **spec.env}


def warm_env(layout: RunLayout, settings: Mapping[str, str] | None = None) -> dict[str, str]:
    """A warm sandbox's environment: no tenant, no run, no credential (the entrypoint sets the run's at claim);
    the name of the checkout its slot holds, where it starts the first step's CLI ahead, and the settings (model
    names, switches: never a key) that CLI is started with."""
    return {**(settings or {}), "FLOWER_ENV": str(layout.env_file), "HOME": str(layout.home), "LANG": "C.UTF-8",
            "PYTHONUNBUFFERED": "1", RUN_MARK: layout.dir.name, WARM_MARK: "1", "FLOWER_WARM_REPO": layout.repo_name}


def claim_slot(layout: RunLayout, spec: RunSpec, owner: tuple[int, int] | None) -> None:
    """Hand a waiting sandbox its run: the checks of ``check_prepared``, the run's files given to its uid, and
    the spec written last (whole, then chowned: the sandbox starts the run the moment it can read it)."""
    from ..spec import write_spec

    if spec.run_id != layout.run_id:
        raise BackendError(f"spec is for run {spec.run_id!r}, layout for {layout.run_id!r}")
    if layout.spec_file.exists():
        raise BackendError(f"the slot {layout.dir} was already claimed: a warm sandbox serves one run only")
    if not layout.env_file.is_file():
        raise BackendError(f"{layout.env_file} does not exist: write the env file before the claim")
    if not (layout.workspace / ".git").is_dir():
        raise BackendError(f"the run's workspace {layout.workspace} must be a checkout made by "
                           "sandbox.worktree.make_workspace before the claim")
    if owner is not None:
        layout.hand_over(*owner)
    path = write_spec(layout, spec)
    if owner is not None:
        os.chown(path, *owner)


def claimed_run(folder: Path) -> str | None:
    """The run a warm sandbox on ``folder`` was handed (the spec in its mailbox, which only the service
    writes), or None while it waits."""
    from ..runfiles import read_json

    data = read_json(folder, "mailbox/spec.json")
    run_id = data.get("run_id") if isinstance(data, dict) else None
    return run_id if valid_run_id(run_id) else None


@runtime_checkable
class Backend(Protocol):
    """Where runs execute. Every method may raise ``BackendUnavailable`` (the engine does not answer) or another
    ``BackendError``; nothing of the engine's own client library comes out."""

    def start(self, layout: RunLayout, spec: RunSpec, *, network: str | None = None) -> Handle:
        """Start the run whose spec is already written at ``layout.spec_file``; returns its handle."""
        ...

    def state(self, handle: Handle) -> State:
        """"running", "exited" or "missing" (unknown handle, or removed)."""
        ...

    def exit_code(self, handle: Handle) -> int | None:
        """The process's exit code once it exited, else None."""
        ...

    def stop(self, handle: Handle, timeout: float = 10) -> None:
        """SIGTERM, then after ``timeout`` seconds SIGKILL; exit.json says "killed" afterwards."""
        ...

    def live(self) -> dict[str, Handle]:
        """``{run_id: handle}`` of every run of this backend still running (claimed warm sandboxes included)."""
        ...

    def remove(self, handle: Handle) -> None:
        """Forget the run's process (a container is deleted); the run's folder is left alone."""
        ...

    def mail_owner(self) -> tuple[int, int] | None:
        """The uid:gid the files the service writes for a run must belong to, or None when the run reads them as
        the service's own (the same uid, or a user namespace that maps it)."""
        ...


@runtime_checkable
class Inspectable(Protocol):
    """A backend that can show a run's output and wait for its end (tests, the operator's tools)."""

    def logs(self, handle: Handle) -> str:
        ...

    def wait(self, handle: Handle, timeout: float | None = None) -> int | None:
        ...


def stopped_exit(folder: Path, timeout: float) -> None:
    """After a stop: if the run in ``folder`` could not write exit.json itself (killed before it could), write it
    — relative to the outbox's fd, through an unguessable temp name: a symlink the run left there is replaced."""
    if read_exit(folder) is not None:
        return
    from ..entrypoint import exit_document
    from ..runfiles import write_file

    data = exit_document("killed", error=f"stopped; the run did not end within {timeout:g}s and was killed")
    try:
        write_file(folder, "outbox/exit.json", data)
    except OSError:
        pass


def read_exit(folder: Path) -> dict[str, object] | None:
    """The run's outbox/exit.json as a dict (read as hostile data); None when missing, odd or not an object."""
    from ..runfiles import read_json

    data = read_json(folder, "outbox/exit.json")
    return data if isinstance(data, dict) else None


@runtime_checkable
class WarmBackend(Backend, Protocol):
    """A backend that can start sandboxes ahead of their runs (``sandbox.pool``)."""

    def warm(self, layout: RunLayout, *, objects: Path | None, egress: Egress,
             settings: Mapping[str, str] | None = None, environment: Prepared | None = None) -> Handle:
        """Start a sandbox on the slot folder ``layout`` (made by the pool, no spec, no env file in it): the
        runner imported and waiting, with ``settings`` in its environment (``warm_env``). Same mounts, limits and
        network as a run of that shape — in the team's prepared ``environment`` when it has one (a backend that
        cannot run one raises BackendError)."""
        ...

    def claim(self, handle: Handle, layout: RunLayout, spec: RunSpec) -> Handle:
        """Hand the waiting sandbox ``handle`` the run ``layout`` (its folder is the slot's); returns the handle."""
        ...

    def slots(self) -> dict[Path, Handle]:
        """``{slot folder: handle}`` of the warm sandboxes still waiting."""
        ...
