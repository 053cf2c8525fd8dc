"""A run's grant on the model gateway: its own token (the env file carries it; the registry keeps its hash) and,
on the Docker and local backends, a socket of its own; re-opened for a run the service re-attaches to. Where the
gateway lives (in this process, or in one of its own reached through the registry) is the ``Metering``'s business
(``service.gateway.metering``), not this module's."""

from __future__ import annotations

import asyncio

from sandbox.layout import RunLayout

from ..clock import SYSTEM, Clock
from ..config import ServiceConfig
from ..errors import LeaseLost
from ..gateway import SOCKET_NAME, Gateway, Grant, new_token
from ..gateway.budgets import Budgets
from ..gateway.metering import Metering, metering_of
from ..logging import get_logger
from ..metrics import Metrics
from ..registry import HeldRun, Run, SpendTable, WireAuditTable
from ..tenants import Tenant, Tenants
from .runenv import left_out, run_environment

__all__ = ["Grants"]

log = get_logger("flower.service.scheduler")


class Grants:
    def __init__(self, config: ServiceConfig, spend: SpendTable, wire_audit: WireAuditTable, tenants: Tenants,
                 gateway: Gateway, budgets: Budgets, metrics: Metrics, *, clock: Clock = SYSTEM) -> None:
        self.config = config
        self.tenants = tenants
        self.gateway = gateway
        self.budgets = budgets
        self.metrics = metrics
        self.metering: Metering = metering_of(config, spend, wire_audit, tenants, gateway, budgets, metrics, clock)
        self._kept_back: dict[str, list[str]] = {}  # tenant → names of its credentials file no run gets (logged)

    def bind(self, loop: asyncio.AbstractEventLoop) -> None:
        """The loop the gateway runs on (the service's): ``open`` is called from worker threads."""
        self.metering.bind(loop)

    def open(self, run: Run, tenant: Tenant, values: dict[str, str], layout: RunLayout, *,
             warm: bool = False, held: HeldRun) -> dict[str, str]:
        """Blocking (a worker thread): the run's token, its socket open on the gateway; the env file's values."""
        token, digest = new_token()
        if held.record_token(run.id, digest) is None:
            raise LeaseLost(f"run {run.id} is no longer this replica's to start (another replica took it over, or "
                            "it ended): no gateway token was given to it", run_id=run.id)
        self.metering.open(run, tenant, digest, values, layout, warm=warm)
        kept_back = left_out(values)
        if kept_back and self._kept_back.get(run.tenant) != kept_back:
            self._kept_back[run.tenant] = kept_back
            log.info("tenant.env_left_out", tenant=run.tenant, names=kept_back,
                     why="not on the run environment's allow-list (service/control/runenv.py): no run gets them")
        if self.config.backend == "kubernetes":
            return run_environment(values, token, url=self.config.gateway_url)
        return run_environment(values, token, socket_path=layout.gateway / SOCKET_NAME)

    async def close(self, held: HeldRun, run_id: str, layout: RunLayout | None = None) -> Grant | None:
        """The run's token ends now — with ``layout``, nothing is served on its socket after this returns."""
        return await self.metering.close(held, run_id, layout)

    async def reopen(self, run: Run, layout: RunLayout) -> None:
        """A re-attached run keeps its token (the service restarted; the run did not) and what it spent."""
        await self.metering.reopen(run, layout)
