"""DockerBackend: one container per run (docker SDK), re-found by label after a service restart.

What the container sees, each at the host's own absolute path so that paths in events and the manifest
mean the same thing on both sides — and nothing else of the run folder or of the host:

* read-write, each mounted on its own: the checkout (workspace), the workbench ``.flower-<repo>``, ``run/``,
  ``home/`` (HOME) and ``outbox/`` (events, exit, questions, the work bundle) — ``RunLayout.writable``;
* read-only: ``mailbox/`` (what the service writes: the spec, the env file ``FLOWER_ENV`` names, answers),
  the team's object store the checkout borrows (``spec.objects``), and ``gateway/`` with the model
  gateway's socket, the run's one way out.

Network: a spec with ``egress="closed"`` (the service's default for every tenant) runs with
``network_mode: none`` — no interface but its own loopback, where the runner bridges to the gateway's
socket (``sandbox.bridge``). ``egress="proxied"`` too: the allow-list's socket (``gateway/egress.sock``, in the same
read-only mount) is its only other way out (``sandbox.egress``). ``egress="open"`` uses ``network_mode`` /
``start(network=...)``. A proxied run's runner is told so in ``FLOWER_EGRESS``.

Hardened by default, each a constructor argument: uid 10001 whatever the service runs as (``user``; uid 0 is
refused: without a user-remapping engine it is the host's root), a
memory limit with no swap on top (``mem_limit``), a CPU quota (``cpus``), a pids limit (``pids_limit``), a
size-capped ``/tmp`` tmpfs (``tmp_size``), a read-only root file system, every capability dropped,
``no-new-privileges``, Docker's default seccomp profile (never ``unconfined``), Docker's read-only ``/proc/sys``,
``sysrq-trigger``, ``irq``, ``bus``, ``fs`` and masked ``/proc/kcore``, ``keys``, ``timer_list``… (never
``privileged``, no ``systempaths=unconfined``), tini as PID 1. A root service
hands the run's folders to that uid before the start (``RunLayout.hand_over``); a non-root service whose
uid differs cannot, so its runs use its own uid (see ``run_user``).
Labels: ``flower.run=<run_id>``, ``flower.tenant=<tenant>``, ``flower.dir=<run folder>`` plus ``labels``; a warm
container (``warm``, for ``sandbox.pool``) has ``flower.warm=<slot folder>`` instead of the first two, and its run
is the one its mailbox's spec names once claimed.
"""

from __future__ import annotations

import functools
import hashlib
import os
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Concatenate, ParamSpec, TypeVar

from ..errors import BackendError, BackendUnavailable, RunExists, SandboxError
from ..layout import RunLayout
from ..egress import EGRESS_ENV
from ..runtime import RUNTIME
from ..runtime import argv as runtime_argv
from ..spec import Egress, Prepared, RunSpec
from .base import Handle, State, check_prepared, claim_slot, claimed_run, run_env, stopped_exit, warm_env

RUN_USER = "10001:10001"

__all__ = ["DockerBackend"]

_RUNNING = {"created", "running", "restarting", "paused"}
P = ParamSpec("P")
T = TypeVar("T")


@contextmanager
def engine_errors(what: str) -> Iterator[None]:
    """Docker's errors, mapped into ours (as httpx's ``map_httpcore_exceptions`` maps httpcore's): an engine that
    does not answer is ``BackendUnavailable``, any other refusal ``BackendError``; the engine's error is the cause."""
    import docker
    import requests

    try:
        yield
    except SandboxError:
        raise
    except (requests.exceptions.ConnectionError, requests.exceptions.Timeout, ConnectionError) as e:
        raise BackendUnavailable(f"the Docker engine does not answer ({what}): {_short(e)}; start it (dockerd) or "
                                 "point DOCKER_HOST at it — runs are not failed while it is away") from e
    except docker.errors.APIError as e:
        if e.status_code in (500, 502, 503) and "connect" in str(e).lower():
            raise BackendUnavailable(f"the Docker engine cannot serve {what} now: {_short(e)}") from e
        if e.status_code == 409:
            raise RunExists(f"Docker already holds a container for this ({what}): {_short(e)}") from e
        raise BackendError(f"Docker refused {what}: {_short(e)}") from e
    except docker.errors.DockerException as e:
        if "connect" in str(e).lower() or "connection" in str(e).lower():
            raise BackendUnavailable(f"the Docker engine does not answer ({what}): {_short(e)}; start it (dockerd) "
                                     "or point DOCKER_HOST at it") from e
        raise BackendError(f"Docker could not do {what}: {_short(e)}") from e


def _mapped(method: Callable[Concatenate[DockerBackend, P], T]) -> Callable[Concatenate[DockerBackend, P], T]:
    """A backend method whose engine errors come out as ours (``engine_errors``)."""

    def wrapper(self: DockerBackend, *args: P.args, **kwargs: P.kwargs) -> T:
        with engine_errors(method.__name__):
            return method(self, *args, **kwargs)

    return functools.update_wrapper(wrapper, method)  # type: ignore[return-value]


def _short(error: BaseException) -> str:
    text = " ".join(str(error).split())
    return text if len(text) <= 300 else text[:299] + "…"


class DockerBackend:
    """Runs the sandbox image (entrypoint ``python -m sandbox.entrypoint``) with the run's spec file as argument.

    ``network_mode`` ("host" in tests, "none" for no network) applies unless ``start(network=...)`` names a
    Docker network. ``labels`` are added to every container and ``live()`` only sees containers that carry
    them. The hardening arguments are described in the module doc.
    """

    def __init__(self, image: str, *, network_mode: str | None = None, user: str = RUN_USER,
                 labels: dict[str, str] | None = None, mem_limit: str | None = "2g", cpus: float | None = 1.0,
                 pids_limit: int | None = 512, tmp_size: str = "256m", read_only: bool = True,
                 client: Any = None) -> None:
        import docker

        if user.split(":")[0] in ("0", "root", ""):
            raise BackendError(f"user {user!r} would run every run as root on the host: pick an unprivileged "
                               f"uid:gid (the default is {RUN_USER})")
        self.image = image
        self.network_mode = network_mode
        self.user = user
        self.labels = dict(labels or {})
        self.mem_limit, self.cpus, self.pids_limit, self.read_only = mem_limit, cpus, pids_limit, read_only
        self.tmp_size = tmp_size
        with engine_errors("connect"):
            self.client = client or docker.from_env()

    # -- the protocol ------------------------------------------------------
    @_mapped
    def start(self, layout: RunLayout, spec: RunSpec, *, network: str | None = None) -> Handle:
        objects = check_prepared(layout, spec)
        labels = {"flower.run": layout.run_id, "flower.tenant": spec.tenant}
        return self._run(layout, self.container_name(layout), objects=objects, egress=spec.egress,
                         env=run_env(layout, spec, str(layout.env_file)), labels=labels, network=network, warm=False,
                         environment=spec.environment)

    @_mapped
    def warm(self, layout: RunLayout, *, objects: Path | None, egress: Egress,
             settings: Mapping[str, str] | None = None, environment: Prepared | None = None) -> Handle:
        """A container on the slot folder ``layout`` with the runner imported and waiting (``sandbox.pool``)."""
        return self._run(layout, f"flower-warm-{layout.dir.name}", objects=objects, egress=egress,
                         env=warm_env(layout, settings), labels={"flower.warm": layout.dir.name}, network=None,
                         warm=True, environment=environment)

    @_mapped
    def claim(self, handle: Handle, layout: RunLayout, spec: RunSpec) -> Handle:
        claim_slot(layout, spec, self.mail_owner(self.user_of(spec.environment)))
        return handle

    @_mapped
    def slots(self) -> dict[Path, Handle]:
        filters: dict[str, str | list[str] | bool] = {
            "label": ["flower.warm", "flower.dir", *(f"{k}={v}" for k, v in self.labels.items())],
                   "status": "running"}
        found = {Path(c.labels["flower.dir"]): Handle(str(c.id)) for c in self.client.containers.list(filters=filters)}
        return {folder: handle for folder, handle in found.items() if claimed_run(folder) is None}

    def _run(self, layout: RunLayout, name: str, *, objects: Path | None, egress: Egress, env: dict[str, str],
             labels: dict[str, str], network: str | None, warm: bool, environment: Prepared | None = None) -> Handle:
        """One container; a ``warm`` one starts in its slot folder, which holds nothing of any run until its claim.
        With the team's ``environment``: its prepared image, flower's runtime mounted read-only and started from
        there, its variables under the run's own, its user (never root) in place of ``user``."""
        import docker
        from docker.types import Mount

        try:
            old = self.client.containers.get(name)
            old.reload()
            if old.status in _RUNNING:
                raise RunExists(f"run {layout.run_id} is already running in container {old.short_id}")
            old.remove(force=True)
        except docker.errors.NotFound:
            pass
        layout.ensure()
        layout.exit_file.unlink(missing_ok=True)
        user = self.user_of(environment)
        owner = self.mail_owner(user)
        if owner is not None:  # warm: the (empty) mailbox to watch, the checkout made ahead, its CLI's home
            layout.hand_over(*owner)
        mounts = [Mount(str(d), str(d), type="bind") for d in layout.writable]
        mounts.append(Mount(str(layout.mailbox), str(layout.mailbox), type="bind", read_only=True))
        if objects is not None:
            mounts.append(Mount(str(objects), str(objects), type="bind", read_only=True))
        if layout.gateway.is_dir():
            mounts.append(Mount(str(layout.gateway), str(layout.gateway), type="bind", read_only=True))
        labels = {**self.labels, **labels, "flower.dir": str(layout.dir)}
        kw: dict[str, Any] = {}
        image, command = self.image, [str(layout.spec_file)]
        if environment is not None:
            mounts.append(Mount(RUNTIME, environment.runtime, type="volume", read_only=True))
            image, command = environment.image, runtime_argv("sandbox.entrypoint", str(layout.spec_file))
            env = {**environment.env, **env}
            kw["entrypoint"] = []
        if egress == "proxied":  # the runner bridges gateway/egress.sock and exports the proxy (sandbox.egress)
            env = {**env, EGRESS_ENV: egress}
        if egress != "open":  # not even loopback to the host: the model (and the allow-list) are behind sockets
            kw["network_mode"] = "none"
        elif network is not None:
            kw["network"] = network
        elif self.network_mode is not None:
            kw["network_mode"] = self.network_mode
        if self.mem_limit:
            kw["mem_limit"] = kw["memswap_limit"] = self.mem_limit
        if self.cpus:
            kw["nano_cpus"] = int(self.cpus * 1e9)
        if self.pids_limit:
            kw["pids_limit"] = self.pids_limit
        try:
            c = self.client.containers.run(
                image, command, name=name, detach=True, labels=labels, environment=env,
                working_dir="/" if warm else str(layout.workspace), mounts=mounts, init=True,
                cap_drop=["ALL"], user=user,
                security_opt=["no-new-privileges"], read_only=self.read_only,
                tmpfs={"/tmp": f"rw,nosuid,nodev,size={self.tmp_size},mode=1777"}, **kw)
        except docker.errors.ImageNotFound:
            raise BackendError(f"image {image} does not exist here: build it with sandbox.image.ensure_image()") \
                from None
        except docker.errors.APIError as e:
            raise BackendError(f"Docker could not start run {layout.run_id}: {e.explanation or e}") from None
        return Handle(str(c.id))

    @_mapped
    def state(self, handle: Handle) -> State:
        c = self._get(handle)
        if c is None:
            return "missing"
        return "running" if c.status in _RUNNING else "exited"

    @_mapped
    def exit_code(self, handle: Handle) -> int | None:
        c = self._get(handle)
        if c is None or c.status in _RUNNING:
            return None
        return int(c.attrs.get("State", {}).get("ExitCode", 0))

    @_mapped
    def stop(self, handle: Handle, timeout: float = 10) -> None:
        c = self._get(handle)
        if c is None:
            return
        if c.status in _RUNNING:
            c.stop(timeout=max(0, int(round(timeout))))
        folder = c.labels.get("flower.dir")
        if folder:
            stopped_exit(Path(folder), timeout)

    @_mapped
    def live(self) -> dict[str, Handle]:
        filters: dict[str, str | list[str] | bool] = {
            "label": ["flower.dir", *(f"{k}={v}" for k, v in self.labels.items())], "status": "running"}
        out: dict[str, Handle] = {}
        for c in self.client.containers.list(filters=filters):
            run_id = c.labels.get("flower.run") or claimed_run(Path(c.labels["flower.dir"]))
            if run_id:
                out[run_id] = Handle(str(c.id))
        return out

    @_mapped
    def remove(self, handle: Handle) -> None:
        import docker

        c = self._get(handle)
        try:
            if c is not None:
                c.remove(force=True)
        except docker.errors.NotFound:
            pass

    # -- extras --------------------------------------------------------------
    @staticmethod
    def container_name(layout: RunLayout) -> str:
        """``flower-run-<run_id>-<8 hex of the run folder>``: one container per run folder on this engine."""
        return f"flower-run-{layout.run_id}-{hashlib.sha256(str(layout.dir).encode()).hexdigest()[:8]}"

    @_mapped
    def logs(self, handle: Handle) -> str:
        c = self._get(handle)
        return c.logs().decode("utf-8", "replace") if c is not None else ""

    @_mapped
    def wait(self, handle: Handle, timeout: float | None = None) -> int | None:
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
        """The container ``handle`` names if it is a run of this backend's (its labels say so), else None: a handle
        comes back from the registry, and one naming any other container on the engine names nothing."""
        import docker

        try:
            c = self.client.containers.get(handle)
        except docker.errors.NotFound:
            return None
        labels = c.labels or {}
        if "flower.dir" not in labels or any(labels.get(k) != v for k, v in self.labels.items()):
            return None
        return c

    def mail_owner(self, user: str | None = None) -> tuple[int, int] | None:
        """Who files the service writes for a run must belong to (so a uid-10001 run can read them)."""
        uid, gid = (int(x) for x in (user or self.run_user()).split(":"))
        return (uid, gid) if os.getuid() == 0 and uid != 0 else None

    def user_of(self, environment: Prepared | None) -> str:
        """The devcontainer's user when a root service can hand it the run's folders; else the backend's."""
        if environment is not None and environment.user and os.getuid() == 0:
            return environment.user
        return self.run_user()

    def run_user(self) -> str:
        """The uid:gid runs use: ``user``, unless a non-root service of another uid could not hand the run its
        folders — then the service's own (the run and the service must share files)."""
        if os.getuid() == 0 or self.user.split(":")[0] == str(os.getuid()):
            return self.user
        return f"{os.getuid()}:{os.getgid()}"
