"""The scheduler: the loop that queued runs become sandboxes in, and sandboxes' events become registry rows and SSE.

One background task, one pass every ``poll_s`` (or at once when woken by a submit/cancel, or by another replica
through the registry's LISTEN/NOTIFY):

1. take over the live runs no replica holds (``Recovery.take_over``);
2. start queued runs (``Starter``: shared between tenants, within ``max_running``, each tenant's quota and
   budget; the ``Launcher`` prepares and starts each — layout → a checkout of its own on ``flower/<run>`` → a
   gateway token of its own → env file → spec → ``backend.start``, or a claim from the warm pool);
3. follow every running run this replica holds — parked (``Parking``) when it has waited for a person past its
   tenant's ``park_after_s``, else its new events (``EventFeed``: folded into the registry,
   logged, fanned out to SSE), its checkpoints (``Harvest``), its disk (``Retention``), what the gateway metered
   (``grants.metering``), its stop when cancelled, over budget, over its disk or its tenant removed; when the
   sandbox has exited it is finished (``Finisher``: drain → decide → collect → record → release, once).

The scheduler's parts share one ``Following`` (the ``LiveRun`` of each run this replica follows, its lease, the
failure streaks, the machine's health); each is handed by ``service.wiring`` only what it uses — the scheduler
itself reads the runs table and nothing else of the registry.

Everything under a run folder that the run can write is read as hostile data (``sandbox.runfiles``);
git runs only in the tenant's own repository, on a copy of the bundle the run can no longer touch
(``sandbox.worktree.import_bundle``). What the run reports (events, its audit lines) is a claim.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from sandbox.backends.base import Backend, Handle
from sandbox.pool import WarmPool

from ..clock import Clock
from ..config import ServiceConfig
from ..logging import get_logger
from ..registry import Run, RunsTable
from ..results import Results
from ..tenants import Tenants
from .feed import EventFeed
from .finishing import Finisher
from .following import Following, ours
from .grants import Grants
from .harvest import Harvest
from .health import is_engine_down
from .hooks import Hooks
from .live import LiveRuns, layout_of, one_line
from .parking import Parking
from .recovery import Recovery
from .retention import Retention
from .starting import Starter
from .warm import WarmKeeper

__all__ = ["Scheduler", "POISON_AFTER"]

log = get_logger("flower.service.scheduler")

POISON_AFTER = 3  # passes in a row in which handling a run's output failed: then the run ends alone (a passing
# fault — a file caught half-written, a lock held a moment — gets the passes before; a poison keeps failing)

Listen = Callable[[Callable[[], None]], Callable[[], None]]
"""``Registry.listen``: wake me when any replica queues a run or changes one's status; returns how to stop."""


class Scheduler:
    """The loop; what it does to a run is done by the parts it composes (``starter``, ``finisher``,
    ``recovery``; ``feed``, ``harvest``, ``retention``, ``warm``, ``grants``, ``results``), none of which knows
    the scheduler."""

    def __init__(self, config: ServiceConfig, runs: RunsTable, tenants: Tenants, backend: Backend, *,
                 listen: Listen, clock: Clock, hooks: Hooks, following: Following, starter: Starter,
                 finisher: Finisher, recovery: Recovery, parking: Parking, grants: Grants, results: Results,
                 feed: EventFeed, harvest: Harvest, warm: WarmKeeper, retention: Retention) -> None:
        """Built by ``service.wiring``, which makes the parts; the scheduler binds its ``hooks``."""
        self.config = config
        self.runs = runs
        self.tenants = tenants
        self.backend = backend
        self._listen = listen
        self.clock = clock
        self.following = following
        self.starter = starter
        self.finisher = finisher
        self.recovery = recovery
        self.parking = parking
        self.grants = grants
        self.results = results
        """Told when a run started, asked and ended: the tenant's webhooks and the push of its branch."""
        self.feed = feed
        self.harvest = harvest
        self.warm = warm
        self.retention = retention
        self.health = following.health
        self.leases = following.leases
        """This replica's leases on the runs it follows, renewed by a thread of their own."""
        self.backoff = following.backoff
        self.errors = following.errors
        # per-loop state
        self._loop: asyncio.AbstractEventLoop | None = None
        self._unlisten: Callable[[], None] = lambda: None
        self._wake: asyncio.Event | None = None
        self._task: asyncio.Task[None] | None = None
        self.ticks = 0
        self._queue_held = False
        hooks.bind(wake=self.wake, over_budget=self._over_budget)

    # -- what the tests read -----------------------------------------------------------------
    @property
    def handles(self) -> dict[str, Handle]:
        """run → its sandbox, for the live runs that have one (a copy: the ``LiveRun`` records are the state)."""
        return self.following.live.handles()

    @property
    def live(self) -> LiveRuns:
        return self.following.live

    @property
    def pool(self) -> WarmPool | None:
        """Sandboxes started ahead (``warm`` > 0 and a backend that can): a run claims one."""
        return self.warm.pool

    # -- lifecycle ---------------------------------------------------------------------------
    async def start(self, *, run_loop: bool = True) -> None:
        """Re-attach to the backend's live runs, start the warm pool, then pass after pass in the background —
        unless ``run_loop`` is False: then the caller drives the passes itself (``tick``), as the fast tests do."""
        self._wake = asyncio.Event()
        self._loop = asyncio.get_running_loop()
        loop = self._loop

        def woken() -> None:  # another replica queued a run or changed one's status
            loop.call_soon_threadsafe(self.wake)

        self._unlisten = self._listen(woken)
        self.leases.start()
        self.warm.bind(self._loop)
        self.grants.bind(self._loop)
        await self.grants.metering.start()
        await self.results.start()  # before recover: a run it finishes is announced (and pushed)
        try:
            await self.recovery.recover()
        except Exception as e:  # noqa: BLE001 - an engine that is down now is waited for, anything else stops us
            if not is_engine_down(e):
                raise
            self.following.engine_down(e)
        if self.pool is not None and self.health.backend_up:
            try:
                await self.warm.sweep()
            except Exception as e:  # noqa: BLE001 - no warm sandboxes is a slower start, never a refusal
                self.following.failed("warm.start_failed", "warm", e)
            self.warm.refill()
        if run_loop:
            self._task = self._loop.create_task(self._run_loop(), name="flower-scheduler")
            self.health.scheduling = True
            self._task.add_done_callback(self._loop_ended)

    async def stop(self) -> None:
        """Stop following; the runs themselves keep running (a restarted service re-attaches)."""
        self._unlisten()
        self.leases.stop()
        tasks = [t for t in [self._task, *self.live.stop_tasks()] if t is not None]
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._task = None
        for live in self.live:
            live.stop_task = None
        await self.warm.stop()
        await self.results.stop()
        for run_id in self.feed.subscribed():
            self.feed.publish_end(run_id)
        await asyncio.to_thread(self.leases.release)  # last: nothing is done under the name after it is free

    def _loop_ended(self, _: asyncio.Task[None]) -> None:
        self.health.scheduling = False  # ``/healthz`` answers 503 from now on

    def wake(self) -> None:
        if self._wake is not None:
            self._wake.set()

    async def _run_loop(self) -> None:
        assert self._wake is not None
        while True:
            try:
                await self.tick()
            except asyncio.CancelledError:
                raise
            except Exception as e:  # noqa: BLE001 - one bad pass must not stop the service
                self.backoff.failed("tick")
                self.following.failed("scheduler.tick_failed", "tick", e)
            else:
                self.backoff.succeeded("tick")
                self.errors.ok("tick")
            try:  # not wait_for: on 3.11 it swallows a stop that meets a wake-up, and this loop never ended
                async with asyncio.timeout(max(self.config.poll_s, self.backoff.delay("tick"))):
                    await self._wake.wait()
            except TimeoutError:
                pass
            self._wake.clear()

    async def tick(self) -> None:
        self.ticks += 1
        if not self.health.backend_up and not await self.recovery.probe_backend():
            return  # its runs cannot be seen: none is failed, none is started, until the engine answers
        await self.recovery.take_over()
        if self._queue_open():
            await self.starter.start_queued()  # first: a submit that woke this pass does not wait behind the rest
        tenants = {t.name for t in self.tenants.all()}
        for run in self.runs.list(statuses=["running"], oldest_first=True):
            record = self.live.get(run.id)
            if record is None or record.lease is None:
                continue  # another replica's
            if run.tenant not in tenants and "tenant_removed" not in record.stops:
                await self.finisher.evict(run)
            else:
                self.grants.metering.follow(run, record)
            if not self.backoff.ready(run.id):
                continue
            try:
                if self.parking.due(run, record):
                    await self.parking.park(run, record)
                    continue
                await self._follow(run)
            except asyncio.CancelledError:
                raise
            except Exception as e:  # noqa: BLE001
                self.backoff.failed(run.id)
                if not ours(e) and self.backoff.failures(run.id) >= POISON_AFTER:
                    await self.finisher.poisoned(run, e)
                    continue
                self.following.failed("scheduler.follow_failed", run.id, e, tenant=run.tenant, run=run.id)
                if not self.health.backend_up:
                    return
            else:
                self.backoff.succeeded(run.id)
                self.errors.ok(run.id)
        self.parking.wake_due()  # a parked run whose question timed out goes back in line
        self.warm.check_due()  # a waiting sandbox that died is replaced, a failed start tried again
        await self.retention.sweep_due()

    def _queue_open(self) -> bool:
        """Queued runs may start unless the disk is low; the hold and its release are logged once each."""
        disk = self.health.disk()
        if disk.low:
            if not self._queue_held:
                self._queue_held = True
                log.warning("scheduler.queue_held", reason=disk.sentence(),
                            queued=self.runs.count(statuses=["queued"]))
            return False
        if self._queue_held:
            self._queue_held = False
            self.backoff.reset()  # what waited on the full disk is tried again now
            log.info("scheduler.queue_released", free_bytes=disk.free_bytes)
        return True

    def _over_budget(self, run_id: str, why: str) -> None:
        """Budgets stopped a run: its record holds why (a grant outlives no run), and the pass stops it."""
        live = self.live.get(run_id)
        if live is not None:
            live.stops.setdefault("budget", why)
        self.wake()

    # -- following ---------------------------------------------------------------------------
    async def _follow(self, run: Run) -> None:
        live = self.live.of(run.id)
        layout = layout_of(self.config.runs_root, run)
        run = self.feed.tail(run, layout.dir, live)
        if live.checkpoint_due:
            live.checkpoint_due = False
            await asyncio.to_thread(self.harvest.take_work, run, layout, live)
        handle = live.handle
        if handle is None:
            await self.finisher.finish(run, "missing")
            return
        await self.retention.check_disk(run, live)
        if (run.cancel_requested or live.stops) and not live.stopping:
            live.stop_task = asyncio.get_running_loop().create_task(self._stop(run, handle))
        state = await asyncio.to_thread(self.backend.state, handle)
        if state == "running":
            return
        await self.finisher.finish(run, state)

    async def _stop(self, run: Run, handle: Handle) -> None:
        """In the background: a stop waits for the run to end, and other runs must not wait with it."""
        log.info("run.cancelling", tenant=run.tenant, run=run.id)
        t0 = self.clock.monotonic()
        try:
            await asyncio.to_thread(self.backend.stop, handle)
            log.info("run.stopped", tenant=run.tenant, run=run.id, took_s=round(self.clock.monotonic() - t0, 3))
        except Exception as e:  # noqa: BLE001 - the next pass sees the state either way
            log.warning("run.stop_failed", tenant=run.tenant, run=run.id, error=one_line(e))
        self.wake()
