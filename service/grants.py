"""A run's grant on the model gateway: its own token (the env file carries it; the registry keeps its hash) and,
on the Docker and local backends, a socket of its own; re-opened for a run the service re-attaches to.

With the gateway in a process of its own (``gateway_process`` "beside" or "external", ``service.gatewayd``) the
registry is the only thing between them: ``open`` writes the token's hash and waits until the gateway's process
serves the run's socket (it reads the active runs every ``gatewayd.SYNC_S``, and at once when ``poke``d — on one
host, which the local and Docker backends are: a run's start does not wait for its next pass); on Kubernetes the
gateway looks an unknown token up itself. ``reopen`` then has nothing to do: the gateway's process re-opens what
is live."""

from __future__ import annotations

import asyncio
import os
import socket
import time
from collections.abc import Coroutine
from typing import TypeVar

from sandbox.layout import RunLayout

from .budgets import Budgets
from .clock import SYSTEM, Clock
from .config import ServiceConfig
from .errors import GatewayNotServing, LeaseLost
from .gateway import SOCKET_NAME, Gateway, Grant, new_token, upstream_of
from .logging import get_logger
from .metrics import Metrics
from .registry import HeldRun, Registry, Run
from .runenv import left_out, run_environment
from .tenants import Tenant, Tenants
from .wire import Usage

__all__ = ["Grants", "server_tools"]

log = get_logger("flower.service.scheduler")
T = TypeVar("T")
SERVED_WITHIN_S = 5.0  # a starting run's socket, served by the gateway's process (it looks every SYNC_S)
CLOSED_WITHIN_S = 2.0  # an ending run's grant, closed by it (a gateway that is down serves nothing anyway)
SYNC_S = 0.2  # how often the gateway's process (service.gatewayd) reads the active runs
WAKE_NAME = "gateway.wake"  # in the data dir: the gateway process's datagram socket, poked for a pass now
_LOOK_S = 0.005  # how often a run's socket is looked for, once the gateway was poked


def poke(data_dir: os.PathLike[str] | str) -> None:
    """The gateway's process on ``data_dir`` reads the grants now, not at its next pass. Best effort: a gateway
    that is not there (or an older one) is found out by whoever waits for its socket."""
    try:
        fd = os.open(data_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError:
        return
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as s:
            s.setblocking(False)
            s.sendto(b".", f"/proc/self/fd/{fd}/{WAKE_NAME}")  # the folder's fd: its path may pass 108 bytes
    except OSError:
        pass
    finally:
        os.close(fd)


def serving(folder: os.PathLike[str] | str) -> bool:
    """Something accepts connections on ``folder/gateway.sock`` (through the folder's fd: the path may pass the
    108 bytes a socket path has). A stale socket file of a gateway that died refuses."""
    try:
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError:
        return False
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(1.0)
            s.connect(f"/proc/self/fd/{fd}/{SOCKET_NAME}")
        return True
    except OSError:
        return False
    finally:
        os.close(fd)


def server_tools(tenant: Tenant) -> frozenset[str]:
    """The server-side tools a run of ``tenant`` may use: none with closed egress, whatever the tenants file lists."""
    return tenant.server_tools if tenant.egress == "open" else frozenset()


class Grants:
    def __init__(self, config: ServiceConfig, registry: Registry, tenants: Tenants, gateway: Gateway,
                 budgets: Budgets, metrics: Metrics, *, clock: Clock = SYSTEM) -> None:
        self.clock = clock
        self.config = config
        self.registry = registry
        self.tenants = tenants
        self.gateway = gateway
        self.budgets = budgets
        self.metrics = metrics
        self._loop: asyncio.AbstractEventLoop | None = None
        self._kept_back: dict[str, list[str]] = {}  # tenant → names of its credentials file no run gets (logged)

    @property
    def inside(self) -> bool:
        """The gateway is this process's (``gateway_process = "inside"``)."""
        return self.config.gateway_process == "inside"

    def bind(self, loop: asyncio.AbstractEventLoop) -> None:
        """The loop the gateway runs on (the service's): ``open`` is called from worker threads."""
        self._loop = loop

    def open(self, run: Run, tenant: Tenant, values: dict[str, str], layout: RunLayout, *,
             warm: bool = False, held: HeldRun) -> dict[str, str]:
        """Blocking (a worker thread): the run's token, its socket open on the gateway; the env file's values."""
        token, digest = new_token()
        if held.record_token(run.id, digest) is None:
            raise LeaseLost(f"run {run.id} is no longer this replica's to start (another replica took it over, or "
                            "it ended): no gateway token was given to it", run_id=run.id)
        kubernetes = self.config.backend == "kubernetes"
        if self.inside:
            upstream, auth = upstream_of(values)
            created = run.created
            grant = Grant(run.id, run.tenant, digest, upstream, auth, server_tools=server_tools(tenant),
                          on_first=lambda: self._first_request(run.id, warm, created))
            self._on_loop(self.gateway.open(grant, None if kubernetes else layout.gateway))
        elif not kubernetes:
            self._wait_served(run, layout)
        kept_back = left_out(values)
        if kept_back and self._kept_back.get(run.tenant) != kept_back:
            self._kept_back[run.tenant] = kept_back
            log.info("tenant.env_left_out", tenant=run.tenant, names=kept_back,
                     why="not on the run environment's allow-list (service/runenv.py): no run gets them")
        if kubernetes:
            return run_environment(values, token, url=self.config.gateway_url)
        return run_environment(values, token, socket_path=layout.gateway / SOCKET_NAME)

    def _first_request(self, run_id: str, warm: bool, created: float) -> None:
        """The gateway in this process saw the run's first model request: the start histogram, and the registry
        (what the gateway's own process writes: a warm pool's refill waits for starting runs by it)."""
        now = self.clock.now()
        self.metrics.first_request(warm, now - created)
        self.registry.wire_audit.record_first_request(run_id, now)

    def _wait_served(self, run: Run, layout: RunLayout) -> None:
        deadline = self.clock.monotonic() + SERVED_WITHIN_S
        poke(self.config.data_path)
        while not serving(layout.gateway):
            if self.clock.monotonic() > deadline:
                raise GatewayNotServing(
                    f"the model gateway process is not serving (run {run.id}'s socket was not served within "
                    f"{SERVED_WITHIN_S:g} s); see its log (the gateway.* lines) and that `python -m service gateway` "
                    f"runs on {self.config.data_dir}", run_id=run.id, waited_s=SERVED_WITHIN_S)
            time.sleep(_LOOK_S)

    async def close(self, held: HeldRun, run_id: str, layout: RunLayout | None = None) -> Grant | None:
        """The run's token ends now: in this process's gateway, or (out of process) its hash leaves the row, which
        the gateway's process sees within a pass — with ``layout``, waited for (the run's socket refuses once its
        grant is closed; on Kubernetes two passes), so that nothing is served on it after this returns."""
        if self.inside:
            return await self.gateway.close(run_id)
        await asyncio.to_thread(held.record_token, run_id, None)
        if layout is not None and self.config.backend == "kubernetes":
            await asyncio.sleep(2 * SYNC_S)
        elif layout is not None:
            deadline = self.clock.monotonic() + CLOSED_WITHIN_S
            poke(self.config.data_path)
            while await asyncio.to_thread(serving, layout.gateway) and self.clock.monotonic() < deadline:
                await asyncio.sleep(_LOOK_S)
        return None

    def _on_loop(self, coro: Coroutine[object, object, T]) -> T:
        assert self._loop is not None, "the scheduler is not started"
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(30)

    async def reopen(self, run: Run, layout: RunLayout) -> None:
        """A re-attached run keeps its token (the service restarted; the run did not) and what it spent."""
        from sandbox.envfile import read_env_file

        if not self.inside:
            return  # the gateway's process re-opens every live run's grant from the registry
        tenant = self.tenants.get(run.tenant)
        if tenant is None or not run.token_sha256:
            return
        try:
            values = await asyncio.to_thread(read_env_file, tenant.credentials)
        except (OSError, ValueError) as e:
            log.warning("run.regrant_failed", tenant=run.tenant, run=run.id, error=type(e).__name__)
            return
        upstream, auth = upstream_of(values)
        grant = Grant(run.id, run.tenant, run.token_sha256, upstream, auth, server_tools=server_tools(tenant),
                      usage=Usage(input_tokens=run.input_tokens, output_tokens=run.output_tokens,
                                  cache_creation_input_tokens=run.cache_write_tokens,
                                  cache_read_input_tokens=run.cache_read_tokens, cost_usd=run.cost_usd))
        await self.gateway.open(grant, None if self.config.backend == "kubernetes" else layout.gateway)
        self.budgets.check(grant, tenant)
