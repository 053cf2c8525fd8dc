"""Where the gateway lives, as the control plane sees it — the one seam that knows (``Metering``).

``InProcess`` (``gateway_process = "inside"``): the service's own ``Gateway`` holds the grants; a run's token is
opened and closed on it, what it spent and counted is read off its grant, and this process's budgets hold and renew
the calls in flight. ``ThroughRegistry`` ("beside" or "external", ``service.gateway.daemon``): the registry is the
only thing between the two processes — ``open`` has the token's hash written already and waits until the
gateway's process serves the run's socket (it reads the active runs every ``SYNC_S``, and at once when ``poke``d —
on one host, which the local and Docker backends are: a run's start does not wait for its next pass; on Kubernetes
the gateway looks an unknown token up itself); ``close`` takes the hash off the row and waits for the socket to
refuse; a restart re-opens nothing (the gateway's process re-opens what is live); and each pass the scheduler
reads the run's row for what the gateway metered (its usage, its first request, its budget) and, at the end, the
wire audit's counts. Nothing outside this module asks which of the two it is.
"""

from __future__ import annotations

import asyncio
import os
import socket
import time
from collections import Counter
from collections.abc import Callable, Coroutine, Mapping
from typing import Protocol, TypeVar

from sandbox.layout import RunLayout

from ..clock import Clock
from ..config import ServiceConfig
from ..control.live import LiveRun, usage_of
from ..errors import GatewayNotServing
from ..logging import get_logger
from ..metrics import Metrics
from ..registry import HeldRun, Run, SpendTable, WireAuditTable
from ..tenants import Tenant, Tenants
from .budgets import Budgets
from .grant import SOCKET_NAME, Grant, upstream_of
from .server import Gateway
from .wire import Usage

__all__ = ["Metering", "InProcess", "ThroughRegistry", "metering_of", "grant_of", "poke", "serving", "server_tools",
           "SYNC_S", "WAKE_NAME", "SERVED_WITHIN_S", "CLOSED_WITHIN_S"]

log = get_logger("flower.service.scheduler")
T = TypeVar("T")
SERVED_WITHIN_S = 30.0  # a starting run's socket, served by the gateway's process (it looks every SYNC_S, and at
# once when poked); 5 s failed a run on a machine at load 36 on two cores, its gateway alive and only slow
CLOSED_WITHIN_S = 2.0  # an ending run's grant, closed by it (a gateway that is down serves nothing anyway)
SYNC_S = 0.2  # how often the gateway's process (service.gateway.daemon) reads the active runs
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


def grant_of(run: Run, tenant: Tenant, values: Mapping[str, str], digest: str, *,
             on_first: Callable[[], None] | None = None, spent: bool = False,
             budget_usd: float | None = None) -> Grant:
    """The run's grant for its token's hash ``digest``, from its row and its tenant's credentials (``spent``: with
    what its row says it spent, for a grant re-opened while the run lives; ``budget_usd``: the run's own budget,
    ``SpendTable.run_budget``)."""
    upstream, auth = upstream_of(values)
    usage = Usage(input_tokens=run.input_tokens, output_tokens=run.output_tokens,
                  cache_creation_input_tokens=run.cache_write_tokens, cache_read_input_tokens=run.cache_read_tokens,
                  cost_usd=run.cost_usd) if spent else Usage()
    return Grant(run.id, run.tenant, digest, upstream, auth, server_tools=server_tools(tenant), on_first=on_first,
                 usage=usage, budget_usd=budget_usd)


class Metering(Protocol):
    """What the control plane (the grants, the scheduler) asks of the gateway wherever it lives."""

    def bind(self, loop: asyncio.AbstractEventLoop) -> None:
        """The loop the service runs on: ``open`` is called from worker threads."""
        ...

    async def start(self) -> None:
        """The scheduler starts (after a restart, perhaps)."""
        ...

    def renew(self) -> None:
        """With the leases, in the renewer's thread: what lives as long as this replica does."""
        ...

    def open(self, run: Run, tenant: Tenant, digest: str, values: dict[str, str], layout: RunLayout, *,
             warm: bool) -> None:
        """Blocking (a worker thread): the run's token (``digest``, written in its row) is served from now on."""
        ...

    async def reopen(self, run: Run, layout: RunLayout) -> None:
        """A re-attached run keeps its token (the service restarted; the run did not) and what it spent."""
        ...

    async def close(self, held: HeldRun, run_id: str, layout: RunLayout | None = None) -> Grant | None:
        """The run's token ends now (with ``layout``: nothing is served on its socket after this returns); its
        row's writes go through ``held`` (fenced by the run's lease)."""
        ...

    def started(self, live: LiveRun) -> None:
        """The run's sandbox started: its first model request is yet to be seen."""
        ...

    def follow(self, run: Run, live: LiveRun) -> None:
        """A scheduler's pass over a running run of this replica's."""
        ...

    async def ending(self, held: HeldRun, run_id: str, layout: RunLayout) -> None:
        """The run ends: before its row says so (no call is served after)."""
        ...

    async def ended(self, run_id: str) -> Counter[str] | None:
        """The run's row says it ended: the wire audit's counts of it (None: none known)."""
        ...

    def count(self, run: Run, live: LiveRun) -> None:
        """What the run spent since the last look, into this process's metrics."""
        ...


class InProcess:
    """The gateway is this process's (``gateway_process = "inside"``)."""

    def __init__(self, config: ServiceConfig, spend: SpendTable, wire_audit: WireAuditTable, tenants: Tenants,
                 gateway: Gateway, budgets: Budgets, metrics: Metrics, clock: Clock) -> None:
        self.config, self.spend, self.wire_audit, self.tenants = config, spend, wire_audit, tenants
        self.gateway, self.budgets, self.metrics, self.clock = gateway, budgets, metrics, clock
        self._loop: asyncio.AbstractEventLoop | None = None

    def bind(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop

    async def start(self) -> None:
        """The calls this process's gateway had in flight before a restart hold nothing."""
        await asyncio.to_thread(self.spend.release_holds, self.budgets.owner)

    def renew(self) -> None:
        self.budgets.renew_due()

    def open(self, run: Run, tenant: Tenant, digest: str, values: dict[str, str], layout: RunLayout, *,
             warm: bool) -> None:
        created, resumed = run.created, run.sandboxes > 0  # a resumed run goes on with what it spent
        first = None if resumed else (lambda: self._first_request(run.id, warm, created))
        grant = grant_of(run, tenant, values, digest, on_first=first, spent=resumed,
                         budget_usd=self.spend.run_budget(run.id))
        kubernetes = self.config.backend == "kubernetes"
        self._on_loop(self.gateway.open(grant, None if kubernetes else layout.gateway))

    def _first_request(self, run_id: str, warm: bool, created: float) -> None:
        """The gateway in this process saw the run's first model request: the start histogram, and the registry
        (what the gateway's own process writes: a warm pool's refill waits for starting runs by it)."""
        now = self.clock.now()
        self.metrics.first_request(warm, now - created)
        self.wire_audit.record_first_request(run_id, now)

    def _on_loop(self, coro: Coroutine[object, object, T]) -> T:
        assert self._loop is not None, "the scheduler is not started"
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(30)

    async def reopen(self, run: Run, layout: RunLayout) -> None:
        from sandbox.envfile import read_env_file

        tenant = self.tenants.get(run.tenant)
        if tenant is None or not run.token_sha256:
            return
        try:
            values = await asyncio.to_thread(read_env_file, tenant.credentials)
        except (OSError, ValueError) as e:
            log.warning("run.regrant_failed", tenant=run.tenant, run=run.id, error=type(e).__name__)
            return
        grant = grant_of(run, tenant, values, run.token_sha256, spent=True,
                         budget_usd=await asyncio.to_thread(self.spend.run_budget, run.id))
        await self.gateway.open(grant, None if self.config.backend == "kubernetes" else layout.gateway)
        self.budgets.check(grant, tenant)

    async def close(self, held: HeldRun, run_id: str, layout: RunLayout | None = None) -> Grant | None:
        return await self.gateway.close(run_id)

    def started(self, live: LiveRun) -> None:
        live.first_request_due = False  # the grant's on_first counts it

    def follow(self, run: Run, live: LiveRun) -> None:
        """Nothing: the gateway's meter stops a run over budget, and counts its usage, itself."""

    async def ending(self, held: HeldRun, run_id: str, layout: RunLayout) -> None:
        """Nothing yet: the grant is closed once the row says the run ended (``ended``)."""

    async def ended(self, run_id: str) -> Counter[str] | None:
        grant = await self.gateway.close(run_id)  # its token ends with it
        return grant.counts if grant is not None else None

    def count(self, run: Run, live: LiveRun) -> None:
        """Nothing: the grant's meter counted it as it came."""


class ThroughRegistry:
    """The gateway is a process of its own (``gateway_process`` "beside" or "external"): the registry is the only
    thing between them."""

    def __init__(self, config: ServiceConfig, wire_audit: WireAuditTable, tenants: Tenants, budgets: Budgets,
                 metrics: Metrics, clock: Clock) -> None:
        self.config, self.wire_audit, self.tenants = config, wire_audit, tenants
        self.budgets, self.metrics, self.clock = budgets, metrics, clock

    def bind(self, loop: asyncio.AbstractEventLoop) -> None:
        """Nothing: ``open`` only waits, in its own thread."""

    async def start(self) -> None:
        """Nothing: the gateway's process lets its own holds go when it starts again."""

    def renew(self) -> None:
        """Nothing: the gateway's process renews the holds of the calls it has in flight."""

    def open(self, run: Run, tenant: Tenant, digest: str, values: dict[str, str], layout: RunLayout, *,
             warm: bool) -> None:
        if self.config.backend == "kubernetes":
            return  # the gateway looks an unknown token up itself
        deadline = self.clock.monotonic() + SERVED_WITHIN_S
        poke(self.config.data_path)
        while not serving(layout.gateway):
            if self.clock.monotonic() > deadline:
                raise GatewayNotServing(
                    f"the model gateway process is not serving (run {run.id}'s socket was not served within "
                    f"{SERVED_WITHIN_S:g} s); see its log (the gateway.* lines) and that `python -m service gateway` "
                    f"runs on {self.config.data_dir}", run_id=run.id, waited_s=SERVED_WITHIN_S)
            time.sleep(_LOOK_S)

    async def reopen(self, run: Run, layout: RunLayout) -> None:
        """Nothing: the gateway's process re-opens every live run's grant from the registry."""

    async def close(self, held: HeldRun, run_id: str, layout: RunLayout | None = None) -> Grant | None:
        """Its hash leaves the row, which the gateway's process sees within a pass — with ``layout``, waited for
        (the run's socket refuses once its grant is closed; on Kubernetes two passes)."""
        await asyncio.to_thread(held.record_token, run_id, None)
        if layout is not None and self.config.backend == "kubernetes":
            await asyncio.sleep(2 * SYNC_S)
        elif layout is not None:
            deadline = self.clock.monotonic() + CLOSED_WITHIN_S
            poke(self.config.data_path)
            while await asyncio.to_thread(serving, layout.gateway) and self.clock.monotonic() < deadline:
                await asyncio.sleep(_LOOK_S)
        return None

    def started(self, live: LiveRun) -> None:
        live.first_request_due = True  # the gateway's process writes it in the row: read each pass (``count``)

    def follow(self, run: Run, live: LiveRun) -> None:
        self._check_budget(run, live)
        self.count(run, live)

    def _check_budget(self, run: Run, live: LiveRun) -> None:
        """The gateway's process refuses a run over budget (403) but cannot stop it: each pass, a running run whose
        row (the gateway's metering) is past its run's or its tenant's day's cap is stopped, with the same
        sentence."""
        tenant = self.tenants.get(run.tenant)
        if tenant is None or "budget" in live.stops:
            return
        why = self.budgets.over(run, tenant)
        if why:
            log.warning("run.over_budget", tenant=run.tenant, run=run.id, error=why)
            live.stops["budget"] = why

    async def ending(self, held: HeldRun, run_id: str, layout: RunLayout) -> None:
        """Its token dies before its row says it ended: no call is served after."""
        await self.close(held, run_id, layout)

    async def ended(self, run_id: str) -> Counter[str] | None:
        return await asyncio.to_thread(self.wire_audit.counts, run_id)

    def count(self, run: Run, live: LiveRun) -> None:
        """The gateway's metering reaches this process's metrics through the run's row: what it grew by since the
        last look (from the first look, for a run re-attached after a restart)."""
        if live.first_request_due and (first := self.wire_audit.first_request(run.id)) is not None:
            live.first_request_due = False
            self.metrics.first_request(live.warm, first - run.created)
        now = usage_of(run)
        before, live.metered = live.metered, now
        if before is None:
            return
        self.metrics.model_usage(run.tenant, cost_usd=now.cost_usd - before.cost_usd, tokens={
            "input": now.input_tokens - before.input_tokens, "output": now.output_tokens - before.output_tokens,
            "cache_write": now.cache_creation_input_tokens - before.cache_creation_input_tokens,
            "cache_read": now.cache_read_input_tokens - before.cache_read_input_tokens})


def metering_of(config: ServiceConfig, spend: SpendTable, wire_audit: WireAuditTable, tenants: Tenants,
                gateway: Gateway, budgets: Budgets, metrics: Metrics, clock: Clock) -> Metering:
    """The seam for ``config.gateway_process``: the only place that reads it for the control plane."""
    if config.gateway_process == "inside":
        return InProcess(config, spend, wire_audit, tenants, gateway, budgets, metrics, clock)
    return ThroughRegistry(config, wire_audit, tenants, budgets, metrics, clock)
