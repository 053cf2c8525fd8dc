"""Parking: a run that has waited for a person longer than its tenant's ``park_after_s`` gives its sandbox back.

Its row says ``parked`` first (fenced by its lease), then its sandbox is stopped (SIGTERM: the runner checkpoints its
work and ends) and everything it held goes — its token, its sandbox, its lease, its slot; only its files and its row
stay. Its open questions stay open: an answer, a message or an interrupt (``Mailbox.wake``), or its question's own
timeout (``wake_due``), puts it back in line, and it is resumed in a new sandbox on its folder (``Launcher``), the
step continuing its session with the person's words. A replica that dies mid-park leaves a parked row whose sandbox
may still run: ``settle`` at the next replica's start stops it (``Recovery``).
"""

from __future__ import annotations

import asyncio
from datetime import datetime

from sandbox.backends.base import Backend, Handle

from ..clock import Clock
from ..config import ServiceConfig
from ..logging import get_logger
from ..metrics import Metrics
from ..registry import Run, RunsTable
from ..results import Results
from ..tenants import Tenants
from .following import Following
from .grants import Grants
from .harvest import Harvest
from .hooks import Hooks
from .live import LiveRun, layout_of, one_line
from .mailbox import Mailbox

__all__ = ["Parking"]

log = get_logger("flower.service.scheduler")


class Parking:
    def __init__(self, config: ServiceConfig, runs: RunsTable, tenants: Tenants, backend: Backend, *,
                 following: Following, grants: Grants, harvest: Harvest, mailbox: Mailbox, results: Results,
                 metrics: Metrics, hooks: Hooks, clock: Clock) -> None:
        self.config = config
        self.runs = runs
        self.tenants = tenants
        self.backend = backend
        self.following = following
        self.grants = grants
        self.harvest = harvest
        self.mailbox = mailbox
        self.results = results
        self.metrics = metrics
        self.hooks = hooks
        self.clock = clock

    def due(self, run: Run, live: LiveRun) -> bool:
        """A pass over a running run this replica follows: True when it has waited for an answer past its tenant's
        ``park_after_s`` (and nothing else is stopping it)."""
        if not live.asking:
            live.waiting_since = None
            return False
        now = self.clock.now()
        if live.waiting_since is None:
            live.waiting_since = now
        tenant = self.tenants.get(run.tenant)
        if tenant is None or tenant.park_after_s is None or live.parking or live.stopping or live.stops \
                or run.cancel_requested or live.handle is None:
            return False
        return now - live.waiting_since >= tenant.park_after_s

    async def park(self, run: Run, live: LiveRun) -> None:
        """Parked now; its sandbox is given back in the background (a stop waits for the run to end)."""
        questions = await asyncio.to_thread(self.mailbox.questions, run)
        deadlines = [at + q.timeout_s for q in questions if q.timeout_s is not None and (at := _epoch(q.asked_at))]
        now = self.clock.now()
        parked = await asyncio.to_thread(self.following.held(run.id).park, run.id, at=now,
                                         wake_at=min(deadlines) if deadlines else None)
        if parked is None:
            return  # it ended or was taken meanwhile
        live.parking = True
        self.metrics.parked(run.tenant)
        self.results.parked(run.id)
        log.info("run.parked", tenant=run.tenant, run=run.id, waited_s=round(now - (live.waiting_since or now), 1),
                 questions=len(questions), wake_at=parked.wake_at)
        live.stop_task = asyncio.get_running_loop().create_task(self._give_back(parked, live))

    async def _give_back(self, run: Run, live: LiveRun) -> None:
        if live.handle is not None:
            try:
                await asyncio.to_thread(self.backend.stop, live.handle)  # SIGTERM: it checkpoints, then ends
            except Exception as e:  # noqa: BLE001 - settle removes it all the same
                log.warning("run.stop_failed", tenant=run.tenant, run=run.id, error=one_line(e))
        await self.settle(run, live)

    async def settle(self, run: Run, live: LiveRun | None) -> None:
        """Everything a parked run held goes: its work taken, its token ended, its sandbox removed (with its
        ``exit.json``: that was not the run's end), its lease let go. Words that reached it while it was being
        parked wake it at once."""
        layout = layout_of(self.config.runs_root, run)
        held = self.following.held(run.id)
        if live is not None:
            try:
                await asyncio.to_thread(self.harvest.take_work, run, layout, live)
            except Exception as e:  # noqa: BLE001 - its work stays in its checkout for the resume
                log.warning("run.harvest_failed", tenant=run.tenant, run=run.id, error=one_line(e))
        await self.grants.close(held, run.id, layout)
        leftover = (live.handle if live is not None else None) or (Handle(run.handle) if run.handle else None)
        if leftover is not None:
            try:
                await asyncio.to_thread(self.backend.remove, leftover)
            except Exception as e:  # noqa: BLE001
                log.warning("run.remove_failed", tenant=run.tenant, run=run.id, error=one_line(e))
        layout.exit_file.unlink(missing_ok=True)
        await asyncio.to_thread(held.parked_gone, run.id)
        self.following.leases.let_go(run.id)
        self.following.forget(run.id)
        if await asyncio.to_thread(self.mailbox.has_words, run):
            self.mailbox.wake(run, "the person's words reached it while it was being parked")
        self.hooks.wake()

    def wake_due(self) -> None:
        """Parked runs whose question timed out are woken: their step reads "nobody answered", never an answer."""
        for run in self.runs.waking(self.clock.now()):
            self.mailbox.wake(run, "its question timed out")


def _epoch(stamp: str) -> float | None:
    try:
        return datetime.fromisoformat(stamp).timestamp()
    except ValueError:
        return None
