"""DockerBackend: one container per run (docker SDK), re-found by label after a service restart.

What the container sees, all at the host's own absolute paths so that paths in events, the manifest
and git's worktree pointers mean the same thing on both sides:

* the run's folder ``<root>/<run_id>/`` read-write: the worktree (the workspace), the workbench
  ``.flower-<repo>``, ``run/``, ``mailbox/``, ``home/`` (HOME), ``events.jsonl`` and ``exit.json``;
* the spec file read-only over itself;
* the env file read-only at ``/run/flower/flower.env`` (``FLOWER_ENV``) and over its own path;
* the repository's git folder (where the worktree's ``.git`` file points) **read-only**: git inside
  can read history, status and diffs, but cannot change the team's branches, config or hooks — the
  service commits the run's work on the host afterwards (``worktree.commit_all``).

The container runs with every capability dropped, ``no-new-privileges``, a read-only root file system
(``/tmp`` is a tmpfs), tini as PID 1 (``init``), and as the service's own uid:gid (``user="auto"``): the
run and the service exchange files both ways (flower writes mailbox files 0600), so they must be one
owner. Run the service as a non-root user and runs are non-root too; a root service gets root runs, with
no capabilities (the image's own user, 10001, is what ``user=None`` gives).
Labels: ``flower.run=<run_id>``, ``flower.tenant=<tenant>``, ``flower.dir=<run folder>`` plus ``labels``.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any

from ..layout import RunLayout
from ..spec import RunSpec
from .base import ENV_IN_CONTAINER, BackendError, check_prepared, run_env, stopped_exit

__all__ = ["DockerBackend", "ENV_IN_CONTAINER"]

_RUNNING = {"created", "running", "restarting", "paused"}


class DockerBackend:
    """Runs the sandbox image (entrypoint ``python -m sandbox.entrypoint``) with the run's spec file as argument.

    ``network_mode`` ("host" in tests, "none" for no network) applies unless ``start(network=...)`` names a
    Docker network. ``user``: "auto" (the service's uid:gid, see the module doc), "uid:gid" (it must be able
    to read the env file and the mailbox), or None for the image's own user.
    ``labels`` are added to every container and ``live()`` only sees containers that carry them.
    """

    def __init__(self, image: str, *, network_mode: str | None = None, user: str | None = "auto",
                 labels: dict[str, str] | None = None, mem_limit: str | None = None, cpus: float | None = None,
                 pids_limit: int | None = 4096, read_only: bool = True, client: Any = None) -> None:
        import docker

        self.image = image
        self.network_mode = network_mode
        self.user = user
        self.labels = dict(labels or {})
        self.mem_limit, self.cpus, self.pids_limit, self.read_only = mem_limit, cpus, pids_limit, read_only
        self.client = client or docker.from_env()

    # -- the protocol ------------------------------------------------------
    def start(self, layout: RunLayout, spec: RunSpec, *, network: str | None = None) -> str:
        import docker
        from docker.types import Mount

        common = check_prepared(layout, spec)
        name = self.container_name(layout)
        try:
            old = self.client.containers.get(name)
            old.reload()
            if old.status in _RUNNING:
                raise BackendError(f"run {layout.run_id} is already running in container {old.short_id}")
            old.remove(force=True)
        except docker.errors.NotFound:
            pass
        layout.ensure()
        layout.exit_file.unlink(missing_ok=True)
        user = self._user()
        mounts = [
            Mount(str(layout.dir), str(layout.dir), type="bind"),
            Mount(str(common), str(common), type="bind", read_only=True),
            Mount(str(layout.spec_file), str(layout.spec_file), type="bind", read_only=True),
            Mount(ENV_IN_CONTAINER, str(layout.env_file), type="bind", read_only=True),
            Mount(str(layout.env_file), str(layout.env_file), type="bind", read_only=True),
        ]
        env = run_env(layout, spec, ENV_IN_CONTAINER)
        labels = {**self.labels, "flower.run": layout.run_id, "flower.tenant": spec.tenant,
                  "flower.dir": str(layout.dir)}
        kw: dict[str, Any] = {}
        if network is not None:
            kw["network"] = network
        elif self.network_mode is not None:
            kw["network_mode"] = self.network_mode
        if self.mem_limit:
            kw["mem_limit"] = self.mem_limit
        if self.cpus:
            kw["nano_cpus"] = int(self.cpus * 1e9)
        if self.pids_limit:
            kw["pids_limit"] = self.pids_limit
        if user:
            kw["user"] = user
        try:
            c = self.client.containers.run(
                self.image, [str(layout.spec_file)], name=name, detach=True, labels=labels, environment=env,
                working_dir=str(layout.dir), mounts=mounts, init=True, cap_drop=["ALL"],
                security_opt=["no-new-privileges"], read_only=self.read_only,
                tmpfs={"/tmp": "rw,nosuid,nodev,mode=1777"}, **kw)
        except docker.errors.ImageNotFound:
            raise BackendError(f"image {self.image} does not exist here: build it with sandbox.image.ensure_image()") \
                from None
        except docker.errors.APIError as e:
            raise BackendError(f"Docker could not start run {layout.run_id}: {e.explanation or e}") from None
        return c.id

    def state(self, handle: str) -> str:
        c = self._get(handle)
        if c is None:
            return "missing"
        return "running" if c.status in _RUNNING else "exited"

    def exit_code(self, handle: str) -> int | None:
        c = self._get(handle)
        if c is None or c.status in _RUNNING:
            return None
        return int(c.attrs.get("State", {}).get("ExitCode", 0))

    def stop(self, handle: str, timeout: float = 10) -> None:
        c = self._get(handle)
        if c is None:
            return
        if c.status in _RUNNING:
            c.stop(timeout=max(0, int(round(timeout))))
        folder = c.labels.get("flower.dir")
        if folder:
            stopped_exit(Path(folder), timeout)

    def live(self) -> dict[str, str]:
        filters = {"label": ["flower.run", *(f"{k}={v}" for k, v in self.labels.items())], "status": "running"}
        return {c.labels["flower.run"]: c.id for c in self.client.containers.list(filters=filters)}

    def remove(self, handle: str) -> None:
        import docker

        try:
            self.client.containers.get(handle).remove(force=True)
        except docker.errors.NotFound:
            pass

    # -- extras --------------------------------------------------------------
    @staticmethod
    def container_name(layout: RunLayout) -> str:
        """``flower-run-<run_id>-<8 hex of the run folder>``: one container per run folder on this engine."""
        return f"flower-run-{layout.run_id}-{hashlib.sha256(str(layout.dir).encode()).hexdigest()[:8]}"

    def logs(self, handle: str) -> str:
        c = self._get(handle)
        return c.logs().decode("utf-8", "replace") if c is not None else ""

    def wait(self, handle: str, timeout: float | None = None) -> int | None:
        """Block until the container exits (or ``timeout``); its exit code."""
        import requests

        c = self._get(handle)
        if c is None:
            return None
        try:
            return int(c.wait(timeout=timeout)["StatusCode"])
        except (requests.exceptions.ConnectionError, requests.exceptions.ReadTimeout):
            return None

    # -- internals -----------------------------------------------------------
    def _get(self, handle: str) -> Any:
        import docker

        try:
            return self.client.containers.get(handle)
        except docker.errors.NotFound:
            return None

    def _user(self) -> str | None:
        """The uid:gid the container runs as: "auto" is the service's own, so every file the run and the
        service exchange (mailbox, events, exit.json, the worktree) has one owner on both sides."""
        if self.user == "auto":
            return f"{os.getuid()}:{os.getgid()}"
        return self.user
