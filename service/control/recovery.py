"""Re-attaching: at start (and when the engine answers again) to the backend's live runs — by label — resuming each
where the registry says it stopped; a run whose sandbox is gone is finished from its exit.json if it wrote one,
else failed with a sentence saying so; and, every quarter of ``lease_s``, taking over the live runs no replica
holds (their replica stopped)."""

from __future__ import annotations

import asyncio

from sandbox.backends.base import Backend, Handle, read_exit

from ..config import ServiceConfig
from ..logging import get_logger
from ..registry import ACTIVE, Run, RunsTable
from .finishing import Finisher
from .following import Following, ours
from .grants import Grants
from .harvest import Harvest
from .health import is_engine_down
from .parking import Parking

__all__ = ["Recovery"]

log = get_logger("flower.service.scheduler")


class Recovery:
    def __init__(self, config: ServiceConfig, runs: RunsTable, backend: Backend, *, following: Following,
                 finisher: Finisher, parking: Parking, grants: Grants, harvest: Harvest) -> None:
        self.config = config
        self.runs = runs
        self.backend = backend
        self.following = following
        self.finisher = finisher
        self.parking = parking
        self.grants = grants
        self.harvest = harvest
        self.recovered = False
        """Re-attached to the backend's live runs once (waits while the engine is down)."""

    async def recover(self) -> None:
        f = self.following
        live = await asyncio.to_thread(self.backend.live)
        self.recovered = True
        for run in self.runs.list(statuses=ACTIVE, oldest_first=True):
            if not f.leases.hold(run.id):
                continue  # another replica holds it
            try:
                await self.recover_one(run, live)
            except asyncio.CancelledError:
                raise
            except Exception as e:  # noqa: BLE001 - one run's files never keep the service from starting
                if ours(e):
                    raise
                f.backoff.failed(run.id)  # the passes try it again, and end it alone if it keeps failing
                f.failed("scheduler.recover_failed", run.id, e, tenant=run.tenant, run=run.id)
        for run_id in set(live) - set(f.live.handles()):
            row = self.runs.get(run_id)
            log.warning("run.orphan_sandbox", run=run_id, status=row.status if row else None,
                        hint="a sandbox labelled as a flower run that this registry does not follow")

    async def recover_one(self, run: Run, live: dict[str, Handle]) -> None:
        """Re-attach one active run to its sandbox, put it back in line, or finish it."""
        layout = self.finisher.layout(run)
        if run.id in live:
            self.following.live.of(run.id).handle = live[run.id]
            await self.grants.reopen(run, layout)
            if run.status == "starting":  # its branch and base were stored before the backend started it
                self.following.held(run.id).record_running(run.id, str(live[run.id]), sandboxes=run.sandboxes + 1)
            log.info("run.reattached", tenant=run.tenant, run=run.id, events=run.event_seq)
        elif run.status == "starting" and run.sandboxes:  # a resume stopped before its sandbox started: its folder
            self.following.held(run.id).requeue(run.id, resumed=True)  # is its work so far, kept for the next try
            log.info("run.requeued", tenant=run.tenant, run=run.id, why="the service stopped while resuming this run")
        elif run.status == "starting":  # stopped before its sandbox started: nothing ran, so it goes back in line
            await asyncio.to_thread(self.harvest.discard_workspace, run, keep_branch=False)
            self.following.held(run.id).requeue(run.id)
            log.info("run.requeued", tenant=run.tenant, run=run.id, why="the service stopped while preparing this run")
        elif read_exit(layout.dir) is not None:  # a record or not: it ended while we were away
            log.info("run.ended_while_away", tenant=run.tenant, run=run.id)
            await self.finisher.finish(run, "exited")
        else:
            await self.finisher.finish(run, "missing", why=(
                f"the service restarted and the {self.config.backend} backend no longer has this run's sandbox "
                "(it ended without writing exit.json)"))

    async def take_over(self) -> None:
        """Every quarter of ``lease_s``: forget the runs another replica took, then take over the live runs no
        replica holds — their replica stopped — and re-attach to them."""
        f = self.following
        changes = f.leases.changes()
        if changes is None:
            return
        for run_id in changes.lost:
            f.lost(run_id)
        if not changes.orphans:
            return
        sandboxes = await asyncio.to_thread(self.backend.live)
        for run_id in changes.orphans:
            run = self.runs.get(run_id)
            if run is None or run.status not in (*ACTIVE, "parked") or not f.leases.hold(run_id):
                continue
            if run.status == "parked":  # its replica died while parking it: the rest of the parking
                f.live.of(run.id).handle = sandboxes.get(run.id)
                await self.parking.settle(run, f.live.get(run.id))
                continue
            log.info("run.taken_over", tenant=run.tenant, run=run.id, replica=f.owner)
            try:
                await self.recover_one(run, sandboxes)
            except Exception as e:  # noqa: BLE001 - as at start: the passes try it again
                if ours(e):
                    raise
                f.backoff.failed(run.id)
                f.failed("scheduler.recover_failed", run.id, e, tenant=run.tenant, run=run.id)

    async def probe_backend(self) -> bool:
        """While the engine is down: ask it again (backing off); when it answers, re-attach. True when it is up."""
        f = self.following
        if not f.backoff.ready("backend"):
            return False
        try:
            if self.recovered:
                await asyncio.to_thread(self.backend.live)
            else:
                await self.recover()
        except Exception as e:  # noqa: BLE001
            f.backoff.failed("backend")
            if not is_engine_down(e):
                f.failed("scheduler.recover_failed", "backend", e)
            return False
        lasted = f.health.backend_ok()
        f.backoff.succeeded("backend")
        handles = f.live.handles()
        log.info("backend.up", backend=self.config.backend, down_s=round(lasted or 0.0, 1),
                 live_runs=len(handles))
        for run_id in handles:
            f.backoff.succeeded(run_id)
        return True
