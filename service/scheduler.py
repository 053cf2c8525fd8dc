"""The scheduler: queued runs become sandboxes, sandboxes' events become registry rows and SSE.

One background task, one pass every ``poll_s`` (or at once when woken by a submit/cancel):

1. start queued runs, shared between tenants (``fair_order``: the least served tenant's oldest first), within the
   global ``max_running`` and each tenant's quota (``Launcher``:
   layout → a checkout of its own on ``flower/<run>`` → a gateway token of its own → env file → spec →
   ``backend.start``, or a claim from the warm pool that ``WarmKeeper`` keeps). A failure of the machine's
   (engine down, disk full) puts the run back in line; any other fails it with the reason;
2. follow every running run — its new events (``EventFeed``: folded into the registry, logged, fanned out to
   SSE), its checkpoints (``Harvest`` takes the work bundle into ``flower/<run>``), its disk (``Retention``),
   its stop when cancelled, over budget, over its disk or its tenant removed; when the sandbox has exited it
   is finished: drain (its last events, exit.json, the exit code) → ``ending.decide`` (pure: how it ended) →
   collect (``Harvest``: the last bundle, the diff stat, the checkout removed) → record (the row) → release
   (token, sandbox, its ``LiveRun``).

Per live run the scheduler holds one ``LiveRun`` (``service.live``), made when it starts or is re-attached and
forgotten in one place when it ends.

What the run spends is measured by the gateway, on the wire, and held against its tenant's budgets
(``Budgets``); a budget crossed stops the run with a sentence saying so. Each run's token and socket on the
gateway are ``Grants``'. The gateway's audit (tool calls, denials, spills) is the one the run cannot touch; the
run's own audit lines are logged too, labelled ``source="run"``, and a disagreement between the two
at the end is logged as ``audit.mismatch``.

Everything under a run folder that the run can write is read as hostile data (``sandbox.runfiles``);
git runs only in the tenant's own repository, on a copy of the bundle the run can no longer touch
(``sandbox.worktree.import_bundle``). What the run reports (events, its audit lines) is a claim.

On startup it re-attaches to the backend's live runs (by label) and resumes tailing where
the registry says it stopped; a run whose sandbox is gone is finished from its exit.json
if it wrote one, else marked failed with a sentence saying so.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from sandbox.backends.base import Backend, Handle, read_exit
from sandbox.layout import RunLayout
from sandbox.pool import WarmPool
from sandbox.records import RecordError, read_exit_record

from .backoff import Backoff, RepeatLog
from .clock import Clock
from .config import ServiceConfig
from .ending import Drained, Ended, decide
from .events import END
from .feed import EventFeed
from .budgets import Budgets
from .leases import Leases
from .streams import StreamSlots
from .gateway import Gateway
from .gate import Gate
from .grants import Grants
from .harvest import Harvest, diffstat
from .health import Health, disk_full_reason, is_disk_full, is_engine_down
from .hooks import Hooks
from .launcher import Launcher
from .live import LiveRun, LiveRuns, layout_of, one_line
from .gateway.wire import Usage
from .logging import get_logger
from .mailbox import Mailbox
from .metrics import FailureReason, Metrics
from .registry import ACTIVE, HeldRun, Kept, Registry, Run, RunStatus
from .results import Results
from .retention import Retention, folder_bytes
from .tenants import Tenant, TenantNotReady, Tenants
from .warm import WarmKeeper

__all__ = ["Scheduler", "END", "diffstat", "POISON_AFTER", "fair_order"]

log = get_logger("flower.service.scheduler")

_one_line = one_line

POISON_AFTER = 3  # passes in a row in which handling a run's output failed: then the run ends alone (a passing
# fault — a file caught half-written, a lock held a moment — gets the passes before; a poison keeps failing)


def _ours(error: BaseException) -> bool:
    """An error of the machine's (engine down, disk full, the registry's database) rather than of one run's
    output: the run waits for it to pass; any other error ends that run alone."""
    import sqlite3

    from sqlalchemy.exc import DBAPIError

    return is_engine_down(error) or is_disk_full(error) or isinstance(error, (sqlite3.Error, DBAPIError))


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


class Scheduler:
    """The loop and the runs' lifecycle; the rest is done by the collaborators it is handed (``service.wiring``
    makes them: ``launcher``, ``warm``, ``feed``, ``harvest``, ``mailbox``, ``retention``, ``budgets``, ``grants``,
    ``leases``, ``slots``), none of which knows the scheduler — those that call back go through ``Hooks``."""

    def __init__(self, config: ServiceConfig, registry: Registry, tenants: Tenants, backend: Backend, *,
                 clock: Clock, gate: Gate, hooks: Hooks, metrics: Metrics, gateway: Gateway, health: Health,
                 live: LiveRuns, errors: RepeatLog, budgets: Budgets, slots: StreamSlots, grants: Grants,
                 results: Results, leases: Leases, feed: EventFeed, harvest: Harvest, warm: WarmKeeper,
                 launcher: Launcher, mailbox: Mailbox, retention: Retention) -> None:
        """Built by ``service.wiring``, which makes the collaborators; the scheduler binds its ``hooks``."""
        self.config = config
        self.registry = registry
        self.tenants = tenants
        self.backend = backend
        self.clock = clock
        self.gate = gate
        """Whether queued runs may start (the guard canary's word)."""
        self.metrics = metrics
        self.gateway = gateway
        self.health = health
        self._live = live
        self.errors = errors
        self.budgets = budgets
        self.slots = slots
        """The tenants' SSE streams, counted across replicas (renewed with the leases)."""
        self.grants = grants
        self.results = results
        """Told when a run started, asked and ended: the tenant's webhooks and the push of its branch."""
        self.leases = leases
        """This replica's leases on the runs it follows, renewed by a thread of their own."""
        self.owner = leases.owner
        """This replica's name on the leases of the runs it follows."""
        self.feed = feed
        self.harvest = harvest
        self.warm = warm
        self.launcher = launcher
        self.mailbox = mailbox
        self.retention = retention
        # per-loop state
        self._loop: asyncio.AbstractEventLoop | None = None
        self._unlisten: Callable[[], None] = lambda: None
        self._wake: asyncio.Event | None = None
        self._task: asyncio.Task[None] | None = None
        self.ticks = 0
        self.backoff = Backoff(base=max(0.5, 2 * config.poll_s), cap=30.0, clock=clock)
        self.recovered = False  # re-attached to the backend's live runs (waits while the engine is down)
        self._queue_held = False
        hooks.bind(wake=self.wake, over_budget=self._over_budget, renewed=self._renewed)

    # -- what the API and the tests read -----------------------------------------------------
    @property
    def handles(self) -> dict[str, Handle]:
        """run → its sandbox, for the live runs that have one (a copy: the ``LiveRun`` records are the state)."""
        return self._live.handles()

    @property
    def live(self) -> LiveRuns:
        return self._live

    @property
    def pool(self) -> WarmPool | None:
        """Sandboxes started ahead (``warm`` > 0 and a backend that can): a run claims one."""
        return self.warm.pool

    def layout(self, run: Run) -> RunLayout:
        return layout_of(self.config.runs_root, run)

    # -- lifecycle ---------------------------------------------------------------------------
    async def start(self, *, run_loop: bool = True) -> None:
        """Re-attach to the backend's live runs, start the warm pool, then pass after pass in the background —
        unless ``run_loop`` is False: then the caller drives the passes itself (``tick``), as the fast tests do."""
        self._wake = asyncio.Event()
        self._loop = asyncio.get_running_loop()
        loop = self._loop

        def woken() -> None:  # another replica queued a run or changed one's status
            loop.call_soon_threadsafe(self.wake)

        self._unlisten = self.registry.listen(woken)
        await asyncio.to_thread(self.slots.reset)  # before the API serves a stream
        self.leases.start()
        self.warm.bind(self._loop)
        self.grants.bind(self._loop)
        await self.grants.metering.start()
        await self.results.start()  # before recover: a run it finishes is announced (and pushed)
        try:
            await self.recover()
        except Exception as e:  # noqa: BLE001 - an engine that is down now is waited for, anything else stops us
            if not is_engine_down(e):
                raise
            self._engine_down(e)
        if self.pool is not None and self.health.backend_up:
            try:
                await self.warm.sweep()
            except Exception as e:  # noqa: BLE001 - no warm sandboxes is a slower start, never a refusal
                self._failed("warm.start_failed", "warm", e)
            self.warm.refill()
        if run_loop:
            self._task = self._loop.create_task(self._run_loop(), name="flower-scheduler")
            self.health.scheduling = True
            self._task.add_done_callback(self._loop_ended)

    async def stop(self) -> None:
        """Stop following; the runs themselves keep running (a restarted service re-attaches)."""
        self._unlisten()
        self.leases.stop()
        tasks = [t for t in [self._task, *self._live.stop_tasks()] if t is not None]
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._task = None
        for live in self._live:
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
                self._failed("scheduler.tick_failed", "tick", e)
            else:
                self.backoff.succeeded("tick")
                self.errors.ok("tick")
            try:
                await asyncio.wait_for(self._wake.wait(), max(self.config.poll_s, self.backoff.delay("tick")))
            except TimeoutError:
                pass
            self._wake.clear()

    async def tick(self) -> None:
        self.ticks += 1
        if not self.health.backend_up and not await self._probe_backend():
            return  # its runs cannot be seen: none is failed, none is started, until the engine answers
        await self._leases()
        if self._queue_open():
            await self._start_queued()  # first: a submit that woke this pass does not wait behind every running run
        tenants = {t.name for t in self.tenants.all()}
        for run in self.registry.runs.list(statuses=["running"], oldest_first=True):
            held = self._live.get(run.id)
            if held is None or held.lease is None:
                continue  # another replica's
            if run.tenant not in tenants and "tenant_removed" not in self._live.of(run.id).stops:
                await self._evict(run)
            else:
                self.grants.metering.follow(run, held)
            if not self.backoff.ready(run.id):
                continue
            try:
                await self._follow(run)
            except asyncio.CancelledError:
                raise
            except Exception as e:  # noqa: BLE001
                self.backoff.failed(run.id)
                if not _ours(e) and self.backoff.failures(run.id) >= POISON_AFTER:
                    await self._poisoned(run, e)
                    continue
                self._failed("scheduler.follow_failed", run.id, e, tenant=run.tenant, run=run.id)
                if not self.health.backend_up:
                    return
            else:
                self.backoff.succeeded(run.id)
                self.errors.ok(run.id)
        self.warm.check_due()  # a waiting sandbox that died is replaced, a failed start tried again
        await self.retention.sweep_due()

    def _queue_open(self) -> bool:
        """Queued runs may start unless the disk is low; the hold and its release are logged once each."""
        disk = self.health.disk()
        if disk.low:
            if not self._queue_held:
                self._queue_held = True
                log.warning("scheduler.queue_held", reason=disk.sentence(),
                            queued=self.registry.runs.count(statuses=["queued"]))
            return False
        if self._queue_held:
            self._queue_held = False
            self.backoff.reset()  # what waited on the full disk is tried again now
            log.info("scheduler.queue_released", free_bytes=disk.free_bytes)
        return True

    # -- leases: which live runs this replica follows (``service.leases``) -------------------------------
    def _lost(self, run_id: str) -> None:
        log.warning("run.lease_lost", run=run_id, replica=self.owner,
                    why="another replica took this run (this one stopped renewing its lease in time); it follows "
                        "the run from now on")
        self._live.forget(run_id)
        self.backoff.succeeded(run_id)
        self.errors.ok(run_id)

    def _taken(self, run_id: str) -> bool:
        """True when another replica holds ``run_id`` now: this one forgets it — no write, no stop, no removal."""
        if not self.leases.taken(run_id):
            return False
        self._lost(run_id)
        return True

    def _renewed(self) -> None:
        """With the leases, in the renewer's thread: what else lives as long as this replica does."""
        self.slots.renew()
        self.grants.metering.renew()

    async def _leases(self) -> None:
        """Every quarter of ``lease_s``: forget the runs another replica took, then take over the live runs no
        replica holds — their replica stopped — and re-attach to them."""
        changes = self.leases.changes()
        if changes is None:
            return
        for run_id in changes.lost:
            self._lost(run_id)
        if not changes.orphans:
            return
        sandboxes = await asyncio.to_thread(self.backend.live)
        for run_id in changes.orphans:
            run = self.registry.runs.get(run_id)
            if run is None or run.status not in ACTIVE or not self.leases.hold(run_id):
                continue
            log.info("run.taken_over", tenant=run.tenant, run=run.id, replica=self.owner)
            try:
                await self._recover_one(run, sandboxes)
            except Exception as e:  # noqa: BLE001 - as at start: the passes try it again
                if _ours(e):
                    raise
                self.backoff.failed(run.id)
                self._failed("scheduler.recover_failed", run.id, e, tenant=run.tenant, run=run.id)

    # -- failures ----------------------------------------------------------------------------
    def _failed(self, event: str, key: str, error: BaseException, **fields: Any) -> None:
        """One failure of a repeating path: noted (disk full, engine down), logged once per streak with a count."""
        if is_disk_full(error):
            self.health.disk_full_seen()
            fields["reason"] = "disk full"
        if is_engine_down(error):
            self._engine_down(error)
            fields["reason"] = "backend down"
        self.errors.error(event, key, error, **fields)

    def _engine_down(self, error: BaseException) -> None:
        if self.health.backend_failed(error):
            self.backoff.failed("backend")
            log.error("backend.down", backend=self.config.backend, error=self.health.backend_error,
                      live_runs=len(self.handles),
                      hint="runs are not marked failed while the engine cannot be seen; they are re-attached "
                           "when it answers again")

    async def _probe_backend(self) -> bool:
        """While the engine is down: ask it again (backing off); when it answers, re-attach. True when it is up."""
        if not self.backoff.ready("backend"):
            return False
        try:
            if self.recovered:
                await asyncio.to_thread(self.backend.live)
            else:
                await self.recover()
        except Exception as e:  # noqa: BLE001
            self.backoff.failed("backend")
            if not is_engine_down(e):
                self._failed("scheduler.recover_failed", "backend", e)
            return False
        lasted = self.health.backend_ok()
        self.backoff.succeeded("backend")
        handles = self.handles
        log.info("backend.up", backend=self.config.backend, down_s=round(lasted or 0.0, 1),
                 live_runs=len(handles))
        for run_id in handles:
            self.backoff.succeeded(run_id)
        return True

    # -- re-attach ---------------------------------------------------------------------------
    async def recover(self) -> None:
        live = await asyncio.to_thread(self.backend.live)
        self.recovered = True
        for run in self.registry.runs.list(statuses=ACTIVE, oldest_first=True):
            if not self.leases.hold(run.id):
                continue  # another replica holds it
            try:
                await self._recover_one(run, live)
            except asyncio.CancelledError:
                raise
            except Exception as e:  # noqa: BLE001 - one run's files never keep the service from starting
                if _ours(e):
                    raise
                self.backoff.failed(run.id)  # the passes try it again, and end it alone if it keeps failing
                self._failed("scheduler.recover_failed", run.id, e, tenant=run.tenant, run=run.id)
        for run_id in set(live) - set(self.handles):
            row = self.registry.runs.get(run_id)
            log.warning("run.orphan_sandbox", run=run_id, status=row.status if row else None,
                        hint="a sandbox labelled as a flower run that this registry does not follow")

    async def _recover_one(self, run: Run, live: dict[str, Handle]) -> None:
        """Re-attach one active run to its sandbox, put it back in line, or finish it."""
        if run.id in live:
            self._live.of(run.id).handle = live[run.id]
            await self.grants.reopen(run, self.layout(run))
            if run.status == "starting":  # its branch and base were stored before the backend started it
                self._held(run.id).record_running(run.id, str(live[run.id]))
            log.info("run.reattached", tenant=run.tenant, run=run.id, events=run.event_seq)
        elif run.status == "starting":  # stopped before its sandbox started: nothing ran, so it goes back in line
            await asyncio.to_thread(self.harvest.discard_workspace, run, keep_branch=False)
            self._held(run.id).requeue(run.id)
            log.info("run.requeued", tenant=run.tenant, run=run.id, why="the service stopped while preparing this run")
        elif read_exit(self.layout(run).dir) is not None:  # a record or not: it ended while we were away
            log.info("run.ended_while_away", tenant=run.tenant, run=run.id)
            await self._finish(run, "exited")
        else:
            await self._finish(run, "missing", why=(
                f"the service restarted and the {self.config.backend} backend no longer has this run's sandbox "
                "(it ended without writing exit.json); its work so far is committed on its branch, "
                "submit the ask again to continue"))

    # -- starting ----------------------------------------------------------------------------
    async def _start_queued(self) -> None:
        """Start what fits, shared between tenants: the next free slot goes to the tenant with the fewest runs
        executing (its oldest queued run), then the next — one tenant's long queue never delays another's start,
        and a pass reads a few queued rows per tenant, not the whole queue."""
        if not self.gate.is_open:
            return
        busy = Counter(r.tenant for r in self.registry.runs.list(statuses=ACTIVE))  # the runs executing now: a few rows
        total = sum(busy.values())
        free = self.config.max_running - total
        if free <= 0:
            return
        for run in fair_order(self.registry.runs.queued_heads(free), busy):
            if total >= self.config.max_running:
                return
            tenant = self.tenants.get(run.tenant)
            if tenant is None:
                self.registry.runs.finish(run.id, "failed", frm=["queued"], ended=self.clock.now(),
                                     error=f"tenant {run.tenant} no longer exists in the tenants file")
                continue
            if busy[run.tenant] >= tenant.quota:
                continue
            over = self.budgets.over_day(tenant)
            if over:
                self.registry.runs.finish(run.id, "failed", frm=["queued"], ended=self.clock.now(), error=over)
                log.warning("run.over_budget", tenant=run.tenant, run=run.id, error=over)
                continue
            if self.registry.runs.begin(run.id, started=self.clock.now()) is None:
                continue  # cancelled in the meantime, or begun by another replica
            if not self.leases.hold(run.id):
                continue
            total += 1
            busy[run.tenant] += 1
            await self._launch(run, tenant)
            if not self.health.backend_up or self.health.disk().low:
                return

    async def _launch(self, run: Run, tenant: Tenant) -> None:
        log.info("run.starting", tenant=run.tenant, run=run.id)
        live = self._live.of(run.id)  # from here: a budget crossed by its first calls is held on it
        live.metered = Usage()  # its first calls count into the metrics (out of process: from its row)
        try:
            held = self._held(run.id)
            started = await asyncio.to_thread(self.launcher.start, run, tenant, held)
        except Exception as e:  # noqa: BLE001 - every failure fails this run, never the scheduler
            await self.grants.close(held, run.id)  # whether it waits or fails, it holds no token
            self._live.forget(run.id)
            if is_engine_down(e) or is_disk_full(e):  # the machine's fault, not the run's: it waits its turn again
                held.requeue(run.id)
                self._failed("scheduler.start_failed", run.id, e, tenant=run.tenant, run=run.id)
                return
            why = str(e) if isinstance(e, TenantNotReady) else f"{type(e).__name__}: {one_line(e)}"
            self._fail(run, f"could not start the run: {why}", frm=["starting"])
            self.metrics.failed_to_start(run.tenant)
            return
        live.handle = started.handle
        live.warm = started.folder is not None
        self.grants.metering.started(live)
        self.metrics.started(run.tenant, self.clock.now() - run.created)
        if held.record_running(run.id, str(started.handle)) is None:
            log.warning("run.vanished_while_starting", tenant=run.tenant, run=run.id)
        self.results.started(run.id)
        log.info("run.started", tenant=run.tenant, run=run.id, branch=self.layout(run).branch, base=started.base,
                 handle=str(started.handle), warm=started.folder)

    def _over_budget(self, run_id: str, why: str) -> None:
        """Budgets stopped a run: its record holds why (a grant outlives no run), and the pass stops it."""
        live = self._live.get(run_id)
        if live is not None:
            live.stops.setdefault("budget", why)
        self.wake()

    # -- following ---------------------------------------------------------------------------
    async def _follow(self, run: Run) -> None:
        live = self._live.of(run.id)
        run = self.feed.tail(run, self.layout(run).dir, live)
        if live.checkpoint_due:
            live.checkpoint_due = False
            await asyncio.to_thread(self.harvest.take_work, run, self.layout(run), live)
        handle = live.handle
        if handle is None:
            await self._finish(run, "missing")
            return
        await self.retention.check_disk(run, live)
        if (run.cancel_requested or live.stops) and not live.stopping:
            live.stop_task = asyncio.get_running_loop().create_task(self._stop(run, handle))
        state = await asyncio.to_thread(self.backend.state, handle)
        if state == "running":
            return
        await self._finish(run, state)

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

    # -- finishing: drain → decide → collect → record → release ------------------------------
    async def _finish(self, run: Run, state: str, *, why: str | None = None) -> None:
        """Nothing of a finish is done by a replica that lost the run: the harvest (its bundle, its checkout) follows
        a fenced renewal of the run's lease, everything else (metrics, ``run.finished``, the sandbox, webhooks, the
        push) the fenced write of its end (``_record``). Once that write is made the run is ended, and no replica
        takes an ended run: what follows it is done once."""
        if self._taken(run.id):
            return  # another replica holds the run now: it finishes it
        row = self.registry.runs.get(run.id)  # read under the lease: an end written before this replica took it shows
        if row is None or row.terminal:
            self._let_go(run.id)
            return
        live = self._live.of(run.id)
        run, drained = await self._drain(run, live, state, why)
        ended = decide(drained)
        if ended.disk_full and drained.exit is not None:  # its exit.json says the disk was full: noted
            self.health.disk_full_seen()
        layout = self.layout(run)
        collected = await asyncio.to_thread(self.harvest.collect, run, layout, live)
        if await self._record(run, live, ended, collected.commit, collected.stat, collected.notes):
            await self._release(run, live)

    async def _drain(self, run: Run, live: LiveRun, state: str, why: str | None) -> tuple[Run, Drained]:
        """Everything the run left: its last events (however many), its exit.json, else the backend's exit code."""
        layout = self.layout(run)
        while True:
            before = run.event_offset
            run = self.feed.tail(run, layout.dir, live)
            if run.event_offset == before:
                break
        bad_exit: str | None = None
        try:
            exit_data = read_exit_record(layout.dir)
        except RecordError as e:
            exit_data, bad_exit = None, str(e)
        code, disk_was_full = None, False
        crashed = exit_data is None and bad_exit is None and state != "missing"
        if crashed and not live.stops and not run.cancel_requested:  # only a crash's sentence needs them
            if live.handle is not None:
                try:
                    code = await asyncio.to_thread(self.backend.exit_code, live.handle)
                except Exception:  # noqa: BLE001
                    code = None
            disk_was_full = self.health.disk_was_full(since=run.started or run.created)
        return run, Drained(stops=dict(live.stops), cancel_requested=run.cancel_requested, exit=exit_data,
                            bad_exit=bad_exit, missing=state == "missing", why_missing=why, exit_code=code,
                            disk_was_full=disk_was_full, claimed_cost_usd=run.claimed_cost_usd)

    async def _record(self, run: Run, live: LiveRun, ended: Ended, commit: str | None,
                      stat: dict[str, Any] | None, notes: list[str]) -> bool:
        """The row, then the token: if the row cannot be written (a full disk), the pass fails here and the next
        one finishes the run again, sandbox and all. False when another replica has taken the run meanwhile: it
        finishes the run, and this one lets it go untouched."""
        layout = self.layout(run)
        error = ended.error
        if ended.disk_full:
            error = disk_full_reason(self.health.disk(fresh=True), layout.branch if commit else None, error)
        branch = run.branch
        if ended.status == "cancelled" and run.base and commit in (None, run.base):  # nothing handed back: no branch
            await asyncio.to_thread(self.harvest.discard_workspace, run, keep_branch=False)
            branch = None
        if notes:
            error = "; ".join([e for e in [error, *notes] if e])
        used = await asyncio.to_thread(folder_bytes, layout.dir)
        if self._taken(run.id):
            return False  # another replica holds the run now (its token too): it finishes the run
        await self.grants.metering.ending(self._held(run.id), run.id, layout)
        at = self.clock.now()
        kept = Kept(commit_sha=commit, branch=branch, diffstat=stat, claimed_cost_usd=ended.claimed_cost_usd,
                    disk_bytes=used)
        if self._held(run.id).finish(run.id, ended.status, ended=at, error=error, kept=kept) is None:
            if not self._taken(run.id):
                self._let_go(run.id)
            return False  # fenced, or ended already: whoever wrote its end does the rest, once
        self.metrics.finished(run.tenant, ended.status, at - run.started if run.started else None, ended.reason)
        wire = await self.grants.metering.ended(run.id)
        self.feed.compare_audits(run, live, wire)
        row = self.registry.runs.get(run.id)
        if row is not None:
            self.grants.metering.count(row, live)  # what it spent since the last pass
        log.info("run.finished", tenant=run.tenant, run=run.id, status=ended.status,
                 cost_usd=round(row.cost_usd, 6) if row else None,
                 claimed_cost_usd=round(ended.claimed_cost_usd, 6),
                 commit=commit, files=len(stat["files"]) if stat else None, error=error)
        return True

    async def _release(self, run: Run, live: LiveRun) -> None:
        """The sandbox goes (a run that went missing may have left processes: local, in its cgroup), then
        everything held for the run; its streams and webhooks are told; its slot is free for the next pass."""
        leftover = live.handle or (Handle(run.handle) if run.handle else None)
        if leftover is not None:
            try:
                await asyncio.to_thread(self.backend.remove, leftover)
            except Exception as e:  # noqa: BLE001
                log.warning("run.remove_failed", tenant=run.tenant, run=run.id, error=one_line(e))
        self._ended(run.id)

    def _held(self, run_id: str) -> HeldRun:
        """The writes of a run this replica follows, fenced by its lease (unfenced when it holds none)."""
        live = self._live.get(run_id)
        return self.registry.runs.under(live.lease if live is not None else None)

    def _let_go(self, run_id: str) -> None:
        """A run this replica holds whose row says it ended already — ended by the replica that held it before this
        one took it (read, then taken: the end came between). Its lease goes, and nothing else is done: no
        harvest, no ``run.finished``, no removal, no webhook — the replica that ended it does those."""
        live = self._live.get(run_id)
        if live is not None and live.lease is not None:
            self.registry.leases.release(live.lease)
        log.info("run.ended_elsewhere", run=run_id, replica=self.owner)
        self._live.forget(run_id)
        self.backoff.succeeded(run_id)
        self.errors.ok(run_id)

    def _ended(self, run_id: str) -> None:
        """The one place a run that ended is forgotten: its record, its lease, its backoff and its error streak."""
        live = self._live.get(run_id)
        if live is not None and live.lease is not None:
            self.registry.leases.release(live.lease)
        self._live.forget(run_id)
        self.backoff.succeeded(run_id)
        self.errors.ok(run_id)
        self.feed.publish_end(run_id)
        self.results.ended(run_id)
        self.wake()

    async def _evict(self, run: Run) -> None:
        """The run's tenant left the tenants file: its token ends now (not one more model call on the tenant's
        key), and the run is stopped with the reason."""
        why = (f"tenant {run.tenant} was removed from the tenants file; the service stopped its run and ended its "
               "model gateway token")
        live = self._live.of(run.id)
        live.stops["tenant_removed"] = why
        await self.grants.close(self._held(run.id), run.id)
        log.warning("run.tenant_removed", tenant=run.tenant, run=run.id, error=why)

    async def _poisoned(self, run: Run, error: BaseException) -> None:
        """Handling this run's output failed: the run ends alone — failed with the reason named, its quota, token
        and sandbox released — and the scheduler and every other run go on. Each step on its own: a step that
        fails too must not keep the others from releasing what the run holds."""
        why = (f"the service could not handle this run's output ({type(error).__name__}: {one_line(error, 300)});"
               " the run was stopped")
        log.error("run.poisoned", tenant=run.tenant, run=run.id, error=why)
        await self._end_alone(run, why, "poisoned")

    async def _end_alone(self, run: Run, why: str, reason: FailureReason) -> None:
        """End a run without reading anything it wrote: row failed, token ended, sandbox and checkout removed."""
        live = self._live.get(run.id)
        handle = (live.handle if live is not None else None) or (Handle(run.handle) if run.handle else None)
        try:
            ended = await asyncio.to_thread(self._held(run.id).finish, run.id, "failed", ended=self.clock.now(),
                                            error=why)
        except Exception as e:  # noqa: BLE001 - the rest is released all the same; the next pass retries the row
            log.warning("run.release_failed", tenant=run.tenant, run=run.id, step="row", error=one_line(e))
        else:
            if ended is None:
                if not self._taken(run.id):
                    self._let_go(run.id)
                return  # fenced, or ended already: whoever wrote its end releases the rest, sandbox and all
            self.metrics.finished(run.tenant, "failed", self.clock.now() - run.started if run.started else None, reason)
        await self.grants.close(self._held(run.id), run.id)
        releases: list[tuple[str, Callable[[], object]]] = [
            ("env file", lambda: self.layout(run).env_file.unlink(missing_ok=True)),
            ("checkout", lambda: self.harvest.discard_workspace(run, keep_branch=True))]
        if handle is not None:
            releases.insert(0, ("sandbox", lambda: self.backend.remove(handle)))
        for what, release in releases:
            try:
                await asyncio.to_thread(release)
            except Exception as e:  # noqa: BLE001
                log.warning("run.release_failed", tenant=run.tenant, run=run.id, step=what, error=one_line(e))
        self._ended(run.id)

    def _fail(self, run: Run, error: str, *, frm: Sequence[RunStatus] = ACTIVE) -> None:
        ended = self._held(run.id).finish(run.id, "failed", frm=frm, ended=self.clock.now(), error=error)
        if ended is None and self._taken(run.id):
            return  # its end was fenced: another replica holds the run now
        log.warning("run.failed", tenant=run.tenant, run=run.id, error=error)
        self._ended(run.id)

