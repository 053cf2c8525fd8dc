"""Starting one run: everything it needs on disk, then its sandbox — a warm one when the pool has one of its shape.

Its team's environment prepared first, when it has one (``environments``: minutes the first time, then the kept
image) → layout → a checkout of its own on ``flower/<run>`` from the repo's HEAD → a gateway token of its own (the
scheduler's ``grant``) in an env file (0600) → spec → ``backend.start``, or ``backend.claim`` of a waiting
sandbox (the run takes its folder). Each step that made something pushes its undo; a failure on the way undoes
them all, last first, and re-raises: the caller decides whether the run waits its turn again or fails.
"""

from __future__ import annotations

import shutil
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import msgspec

from sandbox.backends.base import Backend, Handle
from sandbox.layout import RunLayout
from sandbox.pool import Shape
from sandbox.spec import Resume, RunSpec, write_spec
from sandbox.worktree import head as worktree_head

from ..config import ServiceConfig
from ..errors import RunFolderGone
from ..registry import HeldRun, Run
from ..tenants import Tenant
from .environments import Environments
from .harvest import Harvest
from .live import layout_of
from .runenv import settings_of
from .warm import WarmKeeper

__all__ = ["Launcher", "Started", "GrantFn"]


class GrantFn(Protocol):
    """Blocking: the run's token, its socket open on the gateway; the env file's values."""

    def __call__(self, run: Run, tenant: Tenant, values: dict[str, str], layout: RunLayout, *,
                 warm: bool = False, held: HeldRun) -> dict[str, str]: ...


@dataclass(frozen=True)
class Started:
    handle: Handle
    base: str
    """The commit its checkout started from."""
    folder: str | None
    """The warm slot's folder it took, or None for a cold start."""


class Launcher:
    def __init__(self, config: ServiceConfig, backend: Backend, warm: WarmKeeper,
                 harvest: Harvest, grant: GrantFn, environments: Environments | None = None) -> None:
        self.config = config
        self.environments = environments
        self.backend = backend
        self.warm = warm
        self.harvest = harvest
        self._grant = grant

    def start(self, run: Run, tenant: Tenant, held: HeldRun) -> Started:
        """Blocking: prepare and start ``run`` (its writes ``held``: fenced by its lease); undoes what it made if a
        step fails."""
        from sandbox.envfile import write_env_file
        from sandbox.worktree import make_workspace, objects_dir

        values = tenant.check_ready()  # the repo or the credentials may have changed since the submit
        objects = str(objects_dir(run.repo))
        if run.sandboxes > 0:
            return self._resume(run, tenant, values, objects, held)
        head = environment = None
        if self.environments is not None and self.own_environment(run, tenant):  # its team's, prepared first
            head = worktree_head(run.repo)
            environment = self.environments.of(tenant, run.repo, head, run.id)
        slot = self.warm.claim(Shape.of(Path(run.repo).name, objects, tenant.egress, settings_of(values),
                                        environment))
        with ExitStack() as undo:
            if slot is not None:
                run = msgspec.structs.replace(run, folder=slot.folder)
                held.record_slot(run.id, slot.folder)
                undo.callback(held.record_slot, run.id, None)
                undo.callback(self.warm.discard, slot)
            layout = layout_of(self.config.runs_root, run)
            if slot is None and not layout.dir.exists():
                undo.callback(shutil.rmtree, layout.dir, ignore_errors=True)
            layout.ensure()
            base = make_workspace(run.repo, layout.workspace, layout.branch, base=head or "HEAD")
            undo.callback(held.record_checkout, run.id, None, None)
            undo.callback(self.harvest.discard_workspace, run, keep_branch=False)
            held.record_checkout(run.id, layout.branch, base)  # known even if we stop here
            write_env_file(layout.env_file, self._grant(run, tenant, values, layout, warm=slot is not None,
                                                         held=held))
            spec = RunSpec(run_id=run.id, tenant=run.tenant, ask=run.ask, options=dict(run.options), env={},
                           base=base, objects=objects, egress=tenant.egress, environment=environment,
                           verify=tenant.verify, verify_timeout_s=tenant.verify_timeout_s)
            if slot is not None:
                assert self.warm.pool is not None  # a slot comes from the pool
                handle = self.warm.pool.backend.claim(slot.handle, layout, spec)
            else:
                write_spec(layout, spec)
                handle = self.backend.start(layout, spec)
            undo.pop_all()  # started: nothing is undone
            return Started(handle, base, slot.folder if slot is not None else None)

    def own_environment(self, run: Run, tenant: Tenant) -> bool:
        """Whether the run may start in its team's environment (``environments``): its start may take a setup."""
        return self.environments is not None and self.environments.wanted(tenant, run.repo)

    def _resume(self, run: Run, tenant: Tenant, values: dict[str, str], objects: str, held: HeldRun) -> Started:
        """A run that had a sandbox starts again in a new one on its own folder — its checkout as left, its
        workbench, its sessions and lineage: the library's continuity picks each step up where it stood. The spec
        says it resumes (``RunSpec.resume``); its old exit.json, if any, goes first (it is not this sandbox's end)."""
        from sandbox.envfile import write_env_file

        layout = layout_of(self.config.runs_root, run)
        git = layout.workspace / ".git"
        if not run.base or git.is_symlink() or not git.is_dir():  # make_workspace gives it a git dir of its own
            raise RunFolderGone(f"run {run.id} cannot be resumed: its checkout {layout.workspace} is gone or no longer "
                                "a git checkout", run_id=run.id)
        layout.exit_file.unlink(missing_ok=True)
        environment = self.environments.of(tenant, run.repo, run.base, run.id) \
            if self.environments is not None and self.own_environment(run, tenant) else None
        write_env_file(layout.env_file, self._grant(run, tenant, values, layout, warm=False, held=held))
        resume = Resume(n=run.sandboxes, cause=_resume_cause(run), since_checkpoint_s=_since_checkpoint(run))
        spec = RunSpec(run_id=run.id, tenant=run.tenant, ask=run.ask, options=dict(run.options), env={},
                       base=run.base, objects=objects, egress=tenant.egress, resume=resume, environment=environment,
                       verify=tenant.verify, verify_timeout_s=tenant.verify_timeout_s)
        write_spec(layout, spec)
        return Started(self.backend.start(layout, spec), run.base, None)


def _resume_cause(run: Run) -> str:
    """Why the run starts again: a loss puts it back in line with a backoff (``not_before``, cleared once it runs
    again), a wake-up from parked without one."""
    return run.losses[-1].cause if run.losses and run.not_before is not None else "unparked"


def _since_checkpoint(run: Run) -> float | None:
    return run.losses[-1].since_checkpoint_s if run.losses and run.not_before is not None else None
