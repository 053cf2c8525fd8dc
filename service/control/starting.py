"""Queued runs become sandboxes: what fits starts, shared between tenants (``fair_order``: the least served
tenant's oldest first), within the global ``max_running``, each tenant's quota and its day's budget; each is begun
once (its row, then its lease) and prepared and started by the ``Launcher``. A failure of the machine's (engine
down, disk full) puts the run back in line; any other fails it with the reason."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Mapping, Sequence

from sandbox.errors import SetupFailed

from ..clock import Clock
from ..config import ServiceConfig
from ..errors import TenantNotReady
from ..gateway.budgets import Budgets
from ..gateway.wire import Usage
from ..logging import get_logger
from ..metrics import Metrics
from ..registry import ACTIVE, Run, RunsTable
from ..results import Results
from ..tenants import Tenant, Tenants
from .finishing import Finisher
from .following import Following
from .gate import Gate
from .grants import Grants
from .health import is_disk_full, is_engine_down
from .launcher import Launcher
from .live import layout_of, one_line

__all__ = ["Starter", "fair_order"]

log = get_logger("flower.service.scheduler")


def fair_order(heads: Sequence[Run], busy: Mapping[str, int]) -> list[Run]:
    """Queued runs in the order a pass offers them slots: the k-th queued run of a tenant with b runs executing
    comes as its tenant's (b + k)-th, oldest first among equals — round-robin between tenants, the least served
    first. ``heads``: each tenant's oldest queued runs, oldest first."""
    rank: Counter[str] = Counter()
    keyed = []
    for run in heads:
        rank[run.tenant] += 1
        keyed.append((busy.get(run.tenant, 0) + rank[run.tenant], run.created, run.id, run))
    return [run for *_, run in sorted(keyed, key=lambda k: k[:3])]


class Starter:
    def __init__(self, config: ServiceConfig, runs: RunsTable, tenants: Tenants, *, following: Following,
                 finisher: Finisher, gate: Gate, budgets: Budgets, launcher: Launcher, grants: Grants,
                 results: Results, metrics: Metrics, clock: Clock) -> None:
        self.config = config
        self.runs = runs
        self.tenants = tenants
        self.following = following
        self.finisher = finisher
        self.gate = gate
        self.budgets = budgets
        self.launcher = launcher
        self.grants = grants
        self.results = results
        self.metrics = metrics
        self.clock = clock
        self.launching: set[asyncio.Task[None]] = set()
        """Starts going on beside the passes: runs whose environment is being prepared."""

    async def start_queued(self) -> None:
        """Start what fits, shared between tenants: the next free slot goes to the tenant with the fewest runs
        executing (its oldest queued run), then the next — one tenant's long queue never delays another's start,
        and a pass reads a few queued rows per tenant, not the whole queue."""
        if not self.gate.is_open:
            return
        busy = Counter(r.tenant for r in self.runs.list(statuses=ACTIVE))  # the runs executing now: a few rows
        total = sum(busy.values())
        free = self.config.max_running - total
        if free <= 0:
            return
        health = self.following.health
        for run in fair_order(self.runs.queued_heads(free, now=self.clock.now()), busy):
            if total >= self.config.max_running:
                return
            tenant = self.tenants.get(run.tenant)
            if tenant is None:
                self.runs.finish(run.id, "failed", frm=["queued"], ended=self.clock.now(),
                                 error=f"tenant {run.tenant} no longer exists in the tenants file")
                continue
            if busy[run.tenant] >= tenant.quota:
                continue
            over = self.budgets.over_day(tenant)
            if over:
                self.runs.finish(run.id, "failed", frm=["queued"], ended=self.clock.now(), error=over)
                log.warning("run.over_budget", tenant=run.tenant, run=run.id, error=over)
                continue
            started = run.started if run.sandboxes and run.started else self.clock.now()  # a resume keeps its start
            if self.runs.begin(run.id, started=started, quota=tenant.quota,
                               max_running=self.config.max_running) is None:
                continue  # cancelled in the meantime, begun by another replica, or another's start took the slot
            if not self.following.leases.hold(run.id):
                continue
            total += 1
            busy[run.tenant] += 1
            if await asyncio.to_thread(self.launcher.own_environment, run, tenant):
                # a team's environment may need minutes of setup: the pass (and every other run) does not wait
                task = asyncio.create_task(self._launch(run, tenant))
                self.launching.add(task)
                task.add_done_callback(self.launching.discard)
                continue
            await self._launch(run, tenant)
            if not health.backend_up or health.disk().low:
                return

    async def _launch(self, run: Run, tenant: Tenant) -> None:
        log.info("run.starting", tenant=run.tenant, run=run.id)
        live = self.following.live.of(run.id)  # from here: a budget crossed by its first calls is held on it
        live.metered = Usage()  # its first calls count into the metrics (out of process: from its row)
        held = self.following.held(run.id)
        try:
            started = await asyncio.to_thread(self.launcher.start, run, tenant, held)
        except Exception as e:  # noqa: BLE001 - every failure fails this run, never the scheduler
            await self.grants.close(held, run.id)  # whether it waits or fails, it holds no token
            self.following.live.forget(run.id)
            if is_engine_down(e) or is_disk_full(e):  # the machine's fault, not the run's: it waits its turn again
                held.requeue(run.id, resumed=run.sandboxes > 0)
                self.following.failed("scheduler.start_failed", run.id, e, tenant=run.tenant, run=run.id)
                return
            why = f"{type(e).__name__}: {one_line(e)}"
            if isinstance(e, SetupFailed) and e.tail:  # what the team needs to fix is in the command's output
                why = f"{why}\n{e.tail[-3000:]}"
            if isinstance(e, TenantNotReady):  # the tenant reads what is wrong; the operator's log, where and the fix
                log.warning("tenant.not_ready", tenant=run.tenant, run=run.id, error=str(e))
                why = f"{e.public}: ask the operator of this service to fix it (the service's log says what and how)"
            self.finisher.fail(run, f"could not start the run: {why}", frm=["starting"])
            self.metrics.failed_to_start(run.tenant)
            return
        live.handle = started.handle
        live.warm = started.folder is not None
        if run.sandboxes:  # a resume: its start was counted and announced the first time
            if run.not_before is None:  # woken from parked (a loss was counted when it was lost)
                self.metrics.resumed(run.tenant, "unparked")
        else:
            self.grants.metering.started(live)
            self.metrics.started(run.tenant, self.clock.now() - run.created)
        if held.record_running(run.id, str(started.handle), sandboxes=run.sandboxes + 1) is None:
            log.warning("run.vanished_while_starting", tenant=run.tenant, run=run.id)
        self.results.started(run.id, resumed=run.sandboxes > 0)
        log.info("run.resumed" if run.sandboxes else "run.started", tenant=run.tenant, run=run.id,
                 branch=layout_of(self.config.runs_root, run).branch, base=started.base,
                 handle=str(started.handle), warm=started.folder, sandboxes=run.sandboxes + 1)
