"""The scheduler: queued runs become sandboxes, sandboxes' events become registry rows and SSE.

One background task, one pass every ``poll_s`` (or at once when woken by a submit/cancel):

1. follow every running run — read the new lines of its events.jsonl from the stored byte
   offset, fold status/step/cost into the registry, fan the events out to SSE subscribers,
   log every audit line (guard denial, spill, isolation) as structured JSON with tenant
   and run; on a ``checkpoint`` event, take the run's work bundle into ``flower/<run>``;
   when the sandbox has exited: read exit.json, take the last bundle, store the diff stat,
   release the sandbox, remove the run's credentials and checkout;
2. start queued runs, oldest first, within the global ``max_running`` and each tenant's
   quota: layout → a checkout of its own on ``flower/<run>`` from the repo's HEAD → a gateway
   token of its own and its gateway socket (``service.gateway``) → env file (0600: the token and
   the tenant's non-secret settings, never its key) → spec → ``backend.start``. A failure on the
   way removes what was made and fails the run with the reason.

What the run spends is measured by the gateway, on the wire (``on_usage``): tokens and cost go onto
the run's row and the tenant's day; a tenant's ``budget_usd`` crossed stops the run with a sentence
saying so, and a call is let through only while what is spent and held by the calls in flight stays under
it (``_admit``). The gateway's audit (tool calls, denials, spills) is the one the run cannot touch; the
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
import math
import os
import shutil
import time
from collections import Counter, defaultdict
from pathlib import Path
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import msgspec

from sandbox.backends.base import Backend, Handle, WarmBackend, read_exit
from sandbox.layout import RunLayout
from sandbox.pool import Shape, Slot, WarmPool
from sandbox.records import QUESTION_ID, Event, Question, RecordError, decode_audit, decode_question, read_exit_record
from sandbox.spec import RunSpec, write_spec

from .backoff import Backoff, RepeatLog
from .config import ServiceConfig
from .events import END, read_new
from .gateway import SOCKET_NAME, Gateway, Grant, new_token, upstream_of
from .health import Health, disk_full_reason, is_disk_full, is_engine_down
from .logging import get_logger
from .metrics import FailureReason, Metrics
from .registry import ACTIVE, Registry, Run
from .results import Results
from .retention import folder_bytes, remove_run_files
from .runenv import left_out, run_environment
from .tenants import Tenant, TenantNotReady, Tenants
from .webhooks import Webhooks
from .wire import Usage

if TYPE_CHECKING:
    from sandbox.worktree import Changes

__all__ = ["Scheduler", "END", "diffstat"]

_SUB_QUEUE = 10_000
QUESTION_BYTES = 64 * 1024

log = get_logger("flower.service.scheduler")
audit_log = get_logger("flower.audit")


RUN_DIFFSTAT_FILES = 1_000  # files a run's row lists (GET /v1/runs/{id}/diff/files has them all)


def diffstat(changes: Changes) -> dict[str, Any]:
    """What the run changed, as its row keeps it: {files: [{path, insertions, deletions, binary}], insertions,
    deletions, truncated}, from ``git diff --numstat`` (never the diff itself: it may be huge)."""
    files = [{"path": f.path, "insertions": f.insertions, "deletions": f.deletions, "binary": f.binary}
             for f in changes.files[:RUN_DIFFSTAT_FILES]]
    return {"files": files, "insertions": sum(f.insertions for f in changes.files),
            "deletions": sum(f.deletions for f in changes.files),
            "truncated": changes.truncated or len(changes.files) > RUN_DIFFSTAT_FILES}


def _one_line(text: Any, limit: int = 400) -> str:
    s = " ".join(str(text).split())
    return s if len(s) <= limit else s[: limit - 1] + "…"


def _claimed_cost(value: Any, default: float) -> float:
    """A cost the run reports: a claim, so only a finite, non-negative number is believed."""
    try:
        cost = float(value)
    except (TypeError, ValueError):
        return default
    return cost if math.isfinite(cost) and 0 <= cost < 1e9 else default


POISON_AFTER = 3  # passes in a row in which handling a run's output failed: then the run ends alone (a passing
# fault — a file caught half-written, a lock held a moment — gets the passes before; a poison keeps failing)
DISK_EVERY_S = 10.0  # how often a running run's folder is measured
SWEEP_EVERY_S = 300.0  # how often ended runs older than retain_days are looked for
WARM_CHECK_S = 30.0  # how often the warm pool's waiting sandboxes are checked (and a failed start retried)
REFILL_AFTER_S = 3.0  # a claim refills the pool this much later: a new sandbox's imports (a second of CPU) would
# otherwise compete with the claimed run's CLI start, which is over by then


def _ours(error: BaseException) -> bool:
    """An error of the machine's (engine down, disk full, the registry's database) rather than of one run's
    output: the run waits for it to pass; any other error ends that run alone."""
    import sqlite3

    return is_engine_down(error) or is_disk_full(error) or isinstance(error, sqlite3.Error)


def _server_tools(tenant: Tenant) -> frozenset[str]:
    """The server-side tools a run of ``tenant`` may use: none with closed egress, whatever the tenants file lists."""
    return tenant.server_tools if tenant.egress == "open" else frozenset()


def _day(t: float | None = None) -> str:
    return time.strftime("%Y-%m-%d", time.gmtime(time.time() if t is None else t))


class Scheduler:
    def __init__(self, config: ServiceConfig, registry: Registry, tenants: Tenants, backend: Backend,
                 gateway: Gateway | None = None, *, metrics: Metrics | None = None,
                 results: Results | None = None, clock: Callable[[], float] = time.time) -> None:
        self.config = config
        self.metrics = metrics or Metrics()
        self.clock = clock  # wall time of retention (a test moves it on by days)
        self._measured: dict[str, float] = {}  # run → monotonic time its folder was last measured
        self._over_disk: dict[str, str] = {}  # run → why it is being stopped for its disk use
        self._next_sweep = 0.0
        self.registry = registry
        self.tenants = tenants
        self.backend = backend
        self.gateway = gateway or Gateway(prices=config.prices)
        self.gateway.on_usage = self._metered
        self.gateway.admit = self._admit
        self.results = results or Results(registry, tenants, Webhooks(registry, tenants,
                                                                      retry_s=config.webhook_retry_s))
        """Told when a run started, asked and ended: the tenant's webhooks and the push of its branch."""
        self._overspent: dict[str, str] = {}  # run → the sentence that stopped it
        self._evicted: dict[str, str] = {}  # run → why: its tenant left the tenants file
        self._kept_back: dict[str, list[str]] = {}  # tenant → names of its credentials file no run gets (logged)
        self._claimed: dict[str, Counter[str]] = defaultdict(Counter)  # run → audit kinds the run itself reported
        self._loop: asyncio.AbstractEventLoop | None = None
        self.hold: str | None = None
        """Why queued runs wait (the guard canary has not passed yet); ``refusal`` when it failed."""
        self.refusal: str | None = None
        self.handles: dict[str, Handle] = {}
        self._stopping: dict[str, asyncio.Task[None]] = {}
        self._subs: dict[str, set[asyncio.Queue[Any]]] = defaultdict(set)
        self._checkpoints: set[str] = set()  # runs that said they handed back work since the last import
        self._imported: dict[str, tuple[int, int, int]] = {}  # run → (ino, size, mtime) of the bundle taken
        self.streams: Counter[str] = Counter()  # open SSE streams per tenant
        self._wake: asyncio.Event | None = None
        self._task: asyncio.Task[None] | None = None
        self.ticks = 0
        self.health = Health(config.data_path, config.min_free_mb, config.backend)
        self.backoff = Backoff(base=max(0.5, 2 * config.poll_s), cap=30.0)
        self.errors = RepeatLog(log)
        self.recovered = False  # re-attached to the backend's live runs (waits while the engine is down)
        self._queue_held = False
        self.pool: WarmPool | None = None
        """Sandboxes started ahead (``warm`` > 0 and a backend that can): a run claims one."""
        if config.warm and isinstance(backend, WarmBackend):
            self.pool = WarmPool(backend, config.runs_root, config.warm, on_error=self._warm_failed)
        self._filling: asyncio.Task[int] | None = None
        self._next_warm_check = 0.0

    # -- paths -------------------------------------------------------------------------------
    def layout(self, run: Run) -> RunLayout:
        return RunLayout(self.config.runs_root, run.id, Path(run.repo).name, folder=run.folder or "")

    # -- lifecycle ---------------------------------------------------------------------------
    async def start(self, *, run_loop: bool = True) -> None:
        """Re-attach to the backend's live runs, start the warm pool, then pass after pass in the background —
        unless ``run_loop`` is False: then the caller drives the passes itself (``tick``), as the fast tests do."""
        self._wake = asyncio.Event()
        self._loop = asyncio.get_running_loop()
        await self.results.start()  # before recover: a run it finishes is announced (and pushed)
        try:
            await self.recover()
        except Exception as e:  # noqa: BLE001 - an engine that is down now is waited for, anything else stops us
            if not is_engine_down(e):
                raise
            self._engine_down(e)
        if self.pool is not None and self.health.backend_up:
            try:
                await asyncio.to_thread(self._start_pool, self.pool)
            except Exception as e:  # noqa: BLE001 - no warm sandboxes is a slower start, never a refusal
                self._failed("warm.start_failed", "warm", e)
            self._refill()
        if run_loop:
            self._task = self._loop.create_task(self._run_loop(), name="flower-scheduler")

    async def stop(self) -> None:
        """Stop following; the runs themselves keep running (a restarted service re-attaches)."""
        tasks = [t for t in [self._task, self._filling, *self._stopping.values()] if t is not None]
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._task = None
        self._stopping.clear()
        if self.pool is not None:  # a waiting sandbox holds memory and nothing else: it goes with us
            await asyncio.to_thread(self.pool.close)
        await self.results.stop()
        for run_id in list(self._subs):
            self._publish_end(run_id)

    @property
    def healthy(self) -> bool:
        """The scheduler's loop is running (started and neither crashed nor stopped)."""
        return self._task is not None and not self._task.done()

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
        if self._queue_open():
            await self._start_queued()  # first: a submit that woke this pass does not wait behind every running run
        tenants = {t.name for t in self.tenants.all()}
        for run in self.registry.list(statuses=["running"], oldest_first=True):
            if run.tenant not in tenants and run.id not in self._evicted:
                await self._evict(run)
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
        if self.pool is not None and time.monotonic() >= self._next_warm_check:
            self._next_warm_check = time.monotonic() + WARM_CHECK_S
            self._refill()  # a waiting sandbox that died is replaced, a failed start tried again
        if self.config.retain_days and self.clock() >= self._next_sweep:
            self._next_sweep = self.clock() + SWEEP_EVERY_S
            await self.sweep()

    def _queue_open(self) -> bool:
        """Queued runs may start unless the disk is low; the hold and its release are logged once each."""
        disk = self.health.disk()
        if disk.low:
            if not self._queue_held:
                self._queue_held = True
                log.warning("scheduler.queue_held", reason=disk.sentence(),
                            queued=self.registry.count(statuses=["queued"]))
            return False
        if self._queue_held:
            self._queue_held = False
            self.backoff.reset()  # what waited on the full disk is tried again now
            log.info("scheduler.queue_released", free_bytes=disk.free_bytes)
        return True

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
        log.info("backend.up", backend=self.config.backend, down_s=round(lasted or 0.0, 1),
                 live_runs=len(self.handles))
        for run_id in list(self.handles):
            self.backoff.succeeded(run_id)
        return True

    # -- re-attach ---------------------------------------------------------------------------
    async def recover(self) -> None:
        live = await asyncio.to_thread(self.backend.live)
        self.recovered = True
        for run in self.registry.list(statuses=ACTIVE, oldest_first=True):
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
            row = self.registry.get(run_id)
            log.warning("run.orphan_sandbox", run=run_id, status=row.status if row else None,
                        hint="a sandbox labelled as a flower run that this registry does not follow")

    async def _recover_one(self, run: Run, live: dict[str, Any]) -> None:
        """Re-attach one active run to its sandbox, put it back in line, or finish it."""
        if run.id in live:
            self.handles[run.id] = live[run.id]
            await self._regrant(run)
            if run.status == "starting":  # its branch and base were stored before the backend started it
                self.registry.transition(run.id, "running", frm=["starting"], handle=str(live[run.id]))
            log.info("run.reattached", tenant=run.tenant, run=run.id, events=run.event_seq)
        elif run.status == "starting":  # stopped before its sandbox started: nothing ran, so it goes back in line
            await asyncio.to_thread(self._discard_workspace, run, keep_branch=False)
            self.registry.transition(run.id, "queued", frm=["starting"], started=None, branch=None, base=None,
                                     folder=None)  # a slot it claimed is swept with the waiting ones
            log.info("run.requeued", tenant=run.tenant, run=run.id, why="the service stopped while preparing this run")
        elif read_exit(self.layout(run).dir) is not None:
            log.info("run.ended_while_away", tenant=run.tenant, run=run.id)
            await self._finish(run, "exited")
        else:
            await self._finish(run, "missing", why=(
                f"the service restarted and the {self.config.backend} backend no longer has this run's sandbox "
                "(it ended without writing exit.json); its work so far is committed on its branch, "
                "submit the ask again to continue"))

    # -- starting ----------------------------------------------------------------------------
    async def _start_queued(self) -> None:
        if self.hold or self.refusal:
            return
        busy = Counter(r.tenant for r in self.registry.list(statuses=ACTIVE))  # the runs executing now: a few rows
        total = sum(busy.values())
        if total >= self.config.max_running:
            return
        for run in self.registry.list(statuses=["queued"], oldest_first=True):
            if total >= self.config.max_running:
                return
            tenant = self.tenants.get(run.tenant)
            if tenant is None:
                self.registry.transition(run.id, "failed", frm=["queued"], ended=time.time(),
                                         error=f"tenant {run.tenant} no longer exists in the tenants file")
                continue
            if busy[run.tenant] >= tenant.quota:
                continue
            over = self._over_day(tenant)
            if over:
                self.registry.transition(run.id, "failed", frm=["queued"], ended=time.time(), error=over)
                log.warning("run.over_budget", tenant=run.tenant, run=run.id, error=over)
                continue
            if not self.registry.transition(run.id, "starting", frm=["queued"], started=time.time()):
                continue  # cancelled in the meantime
            total += 1
            busy[run.tenant] += 1
            await self._launch(run, tenant)
            if not self.health.backend_up or self.health.disk().low:
                return

    async def _launch(self, run: Run, tenant: Tenant) -> None:
        log.info("run.starting", tenant=run.tenant, run=run.id)
        try:
            handle, base, folder = await asyncio.to_thread(self._prepare_and_start, run, tenant)
        except Exception as e:  # noqa: BLE001 - every failure fails this run, never the scheduler
            if is_engine_down(e) or is_disk_full(e):  # the machine's fault, not the run's: it waits its turn again
                self.registry.transition(run.id, "queued", frm=["starting"], started=None)
                self._failed("scheduler.start_failed", run.id, e, tenant=run.tenant, run=run.id)
                return
            why = str(e) if isinstance(e, TenantNotReady) else f"{type(e).__name__}: {_one_line(e)}"
            await self.gateway.close(run.id)
            self._fail(run, f"could not start the run: {why}", frm=["starting"])
            self.metrics.failed_to_start(run.tenant)
            return
        self.handles[run.id] = handle
        self.metrics.started(run.tenant, time.time() - run.created)
        if not self.registry.transition(run.id, "running", frm=["starting"], handle=str(handle)):
            log.warning("run.vanished_while_starting", tenant=run.tenant, run=run.id)
        self.results.started(run.id)
        log.info("run.started", tenant=run.tenant, run=run.id, branch=self.layout(run).branch, base=base,
                 handle=str(handle), warm=folder)

    def _prepare_and_start(self, run: Run, tenant: Tenant) -> tuple[Handle, str, str | None]:
        """Blocking: everything a run needs on disk, then the sandbox — a warm one when the pool has one of the
        run's shape (the run takes its folder). Returns (handle, base, the slot's folder or None). Undoes what it
        made if a step fails."""
        from sandbox.envfile import write_env_file
        from sandbox.worktree import make_workspace, objects_dir

        values = tenant.check_ready()  # the repo or the credentials may have changed since the submit
        objects = str(objects_dir(run.repo))
        slot = self._claim(Shape(Path(run.repo).name, objects, tenant.egress))
        if slot is not None:
            run = msgspec.structs.replace(run, folder=slot.folder)
            self.registry.update(run.id, folder=slot.folder)
        layout = self.layout(run)
        made_dir = not layout.dir.exists()
        workspace = False
        try:
            layout.ensure()
            base = make_workspace(run.repo, layout.workspace, layout.branch)
            workspace = True
            self.registry.update(run.id, branch=layout.branch, base=base)  # known even if we stop right here
            write_env_file(layout.env_file, self._grant(run, tenant, values, layout))
            spec = RunSpec(run_id=run.id, tenant=run.tenant, ask=run.ask, options=dict(run.options), env={},
                           base=base, objects=objects, egress=tenant.egress)
            if slot is not None:
                assert self.pool is not None
                return self.pool.backend.claim(slot.handle, layout, spec), base, slot.folder
            write_spec(layout, spec)
            return self.backend.start(layout, spec), base, None
        except BaseException:
            if workspace:
                self._discard_workspace(run, keep_branch=False)
                self.registry.update(run.id, branch=None, base=None)
            if slot is not None:
                assert self.pool is not None
                self.pool.discard(slot)
                self.registry.update(run.id, folder=None)
            elif made_dir:
                shutil.rmtree(layout.dir, ignore_errors=True)
            raise

    # -- the warm pool -------------------------------------------------------------------------
    def _claim(self, shape: Shape) -> Slot | None:
        """Blocking: a waiting sandbox of the run's shape, if the pool has one; the pool refills either way."""
        if self.pool is None:
            return None
        slot = self.pool.claim(shape)
        self.metrics.warm.labels("hit" if slot is not None else "miss").inc()
        assert self._loop is not None
        self._loop.call_soon_threadsafe(self._loop.call_later, REFILL_AFTER_S, self._refill)
        return slot

    def _start_pool(self, pool: WarmPool) -> None:
        """Blocking: what a previous service left waiting goes (the first fill wants every tenant's shape)."""
        removed = pool.sweep(keep=self.registry.folders().__contains__)
        if removed:
            log.info("warm.swept", sandboxes=removed, why="started by an earlier service")

    def _fill(self, pool: WarmPool) -> int:
        """Blocking: the pool keeps the shapes of the tenants there are now (the tenants file is re-read when it
        changes: a new tenant gets waiting sandboxes, a removed one's go), then tops them up."""
        from sandbox.worktree import objects_dir

        shapes: set[Shape] = set()
        for tenant in self.tenants.all():
            key = f"warm:{tenant.name}"
            try:
                shapes.add(Shape(Path(tenant.repo).name, str(objects_dir(tenant.repo)), tenant.egress))
            except Exception as e:  # noqa: BLE001 - a tenant whose repo is not ready gets no warm sandbox
                self.errors.error("warm.tenant_skipped", key, e, tenant=tenant.name)
            else:
                self.errors.ok(key)
        pool.retain(shapes)
        return pool.fill()

    def _refill(self) -> None:
        """Top the pool up in a worker thread, one fill at a time (a claim during a fill is picked up next)."""
        if self.pool is None or self._loop is None or (self._filling is not None and not self._filling.done()):
            return
        self._filling = self._loop.create_task(asyncio.to_thread(self._fill, self.pool), name="flower-warm-fill")
        self._filling.add_done_callback(self._filled)

    def _filled(self, task: asyncio.Task[int]) -> None:
        if task.cancelled():
            return
        error = task.exception()
        if error is not None:
            self._warm_failed(None, error)
            return
        full = self.pool is None or all(n >= self.pool.size for n in self.pool.waiting().values())
        if task.result() and not full:
            self._refill()  # claimed while it filled
        elif full:
            self.errors.ok("warm")
        # a fill that started nothing and left the pool short failed: the periodic check (WARM_CHECK_S) retries

    def _warm_failed(self, shape: Shape | None, error: BaseException) -> None:
        self.errors.error("warm.start_failed", "warm", error, repo=shape.repo_name if shape else None)

    # -- the gateway ---------------------------------------------------------------------------
    def _grant(self, run: Run, tenant: Tenant, values: dict[str, str], layout: RunLayout) -> dict[str, str]:
        """Blocking (a worker thread): the run's token, its socket open on the gateway; the env file's values."""
        token, digest = new_token()
        upstream, auth = upstream_of(values)
        grant = Grant(run.id, run.tenant, digest, upstream, auth, server_tools=_server_tools(tenant))
        self.registry.update(run.id, token_sha256=digest)
        kubernetes = self.config.backend == "kubernetes"
        self._on_loop(self.gateway.open(grant, None if kubernetes else layout.gateway))
        kept_back = left_out(values)
        if kept_back and self._kept_back.get(run.tenant) != kept_back:
            self._kept_back[run.tenant] = kept_back
            log.info("tenant.env_left_out", tenant=run.tenant, names=kept_back,
                     why="not on the run environment's allow-list (service/runenv.py): no run gets them")
        if kubernetes:
            return run_environment(values, token, url=self.config.gateway_url)
        return run_environment(values, token, socket_path=layout.gateway / SOCKET_NAME)

    def _on_loop(self, coro: Any) -> Any:
        assert self._loop is not None, "the scheduler is not started"
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(30)

    async def _regrant(self, run: Run) -> None:
        """A re-attached run keeps its token (the service restarted; the run did not) and what it spent."""
        from sandbox.envfile import read_env_file

        tenant = self.tenants.get(run.tenant)
        if tenant is None or not run.token_sha256:
            return
        try:
            values = await asyncio.to_thread(read_env_file, tenant.credentials)
        except (OSError, ValueError) as e:
            log.warning("run.regrant_failed", tenant=run.tenant, run=run.id, error=type(e).__name__)
            return
        upstream, auth = upstream_of(values)
        grant = Grant(run.id, run.tenant, run.token_sha256, upstream, auth, server_tools=_server_tools(tenant),
                      usage=Usage(input_tokens=run.input_tokens, output_tokens=run.output_tokens,
                                  cache_creation_input_tokens=run.cache_write_tokens,
                                  cache_read_input_tokens=run.cache_read_tokens, cost_usd=run.cost_usd))
        await self.gateway.open(grant, None if self.config.backend == "kubernetes" else self.layout(run).gateway)
        self._check_budget(grant, tenant)

    def _metered(self, grant: Grant, usage: Usage) -> None:
        """One answer measured by the gateway: onto the run and the tenant's day; budgets checked."""
        self.registry.add_usage(grant.run_id, grant.tenant, _day(), input_tokens=usage.input_tokens,
                                output_tokens=usage.output_tokens,
                                cache_write_tokens=usage.cache_creation_input_tokens,
                                cache_read_tokens=usage.cache_read_input_tokens, cost_usd=usage.cost_usd)
        self.metrics.model_usage(grant.tenant, cost_usd=usage.cost_usd, tokens={
            "input": usage.input_tokens, "output": usage.output_tokens,
            "cache_write": usage.cache_creation_input_tokens, "cache_read": usage.cache_read_input_tokens})
        tenant = self.tenants.get(grant.tenant)
        if tenant is not None and self.gateway.grant(grant.run_id) is grant:  # an answer read on past the run's end
            self._check_budget(grant, tenant)

    def _over_day(self, tenant: Tenant) -> str | None:
        cap = tenant.budget_usd.day
        if cap is None:
            return None
        spent = self.registry.spent(tenant.name, _day())["cost_usd"]
        if spent < cap:
            return None
        return (f"over budget: tenant {tenant.name} has spent ${spent:.4f} of its ${cap:.2f} daily budget today "
                "(UTC, measured by the model gateway); the run was stopped — raise `budget_usd.day` or wait "
                "for tomorrow")

    def _check_budget(self, grant: Grant, tenant: Tenant) -> None:
        cap = tenant.budget_usd.run
        if cap is not None and grant.usage.cost_usd >= cap:
            self._overspend(grant, f"over budget: this run has spent ${grant.usage.cost_usd:.4f} of its "
                                   f"${cap:.2f} per-run budget (tenant {tenant.name}, measured by the model "
                                   "gateway); the service stopped it — raise `budget_usd.run` to allow more")
            return
        over = self._over_day(tenant)
        if over:
            for g in self.gateway.grants(tenant=tenant.name):
                self._overspend(g, over)

    def _admit(self, grant: Grant) -> str | None:
        """Before the gateway forwards a call: None when the budgets have room beside the calls in flight, each
        holding the most it can cost (``Grant.reserved``); else why not. Room means spent + held stays under a cap,
        so however many calls run at once a budget is passed by at most the one call let in last. Spent alone
        at a cap stops the run (403 from then on); held by calls in flight, the call waits for them (429: the CLI
        retries, and a subagent is not lost to a budget that is only promised)."""
        tenant = self.tenants.get(grant.tenant)
        if tenant is None:
            return None
        self._check_budget(grant, tenant)
        if grant.refused:
            return grant.refused
        cap = tenant.budget_usd.run
        if cap is not None and grant.usage.cost_usd + grant.reserved >= cap:
            return (f"over budget for now: this run has spent ${grant.usage.cost_usd:.4f} and its calls in flight "
                    f"may cost ${grant.reserved:.4f} more of its ${cap:.2f} per-run budget (tenant {tenant.name}, "
                    "measured by the model gateway); retry once they are answered, or raise `budget_usd.run`")
        day = tenant.budget_usd.day
        if day is not None:
            spent = self.registry.spent(tenant.name, _day())["cost_usd"]
            held = sum(g.reserved for g in self.gateway.grants(tenant=tenant.name))
            if spent + held >= day:
                return (f"over budget for now: tenant {tenant.name} has spent ${spent:.4f} today and its calls in "
                        f"flight may cost ${held:.4f} more of its ${day:.2f} daily budget (UTC, measured by the "
                        "model gateway); retry once they are answered, or raise `budget_usd.day`")
        return None

    def _overspend(self, grant: Grant, why: str) -> None:
        if grant.refused:
            return
        grant.refused = why  # the gateway answers 403 from now on: not one more token is spent
        self._overspent[grant.run_id] = why
        log.warning("run.over_budget", tenant=grant.tenant, run=grant.run_id, error=why)
        self.wake()

    # -- following ---------------------------------------------------------------------------
    async def _follow(self, run: Run) -> None:
        run = self._tail(run)
        if run.id in self._checkpoints:
            self._checkpoints.discard(run.id)
            await asyncio.to_thread(self._take_work, run, self.layout(run))
        handle = self.handles.get(run.id)
        if handle is None:
            await self._finish(run, "missing")
            return
        await self._check_disk(run)
        if (run.cancel_requested or run.id in self._over_disk or run.id in self._overspent
                or run.id in self._evicted) and run.id not in self._stopping:
            self._stopping[run.id] = asyncio.get_running_loop().create_task(self._stop(run, handle))
        state = await asyncio.to_thread(self.backend.state, handle)
        if state == "running":
            return
        await self._finish(run, state)

    async def _check_disk(self, run: Run) -> None:
        """Every ``DISK_EVERY_S``: measure the run's folder, store it, and stop a run past ``max_run_disk_mb``."""
        now = time.monotonic()
        if now - self._measured.get(run.id, 0.0) < DISK_EVERY_S:
            return
        self._measured[run.id] = now
        used = await asyncio.to_thread(folder_bytes, self.layout(run).dir)
        self.registry.update(run.id, disk_bytes=used)
        run.disk_bytes = used
        limit = int(self.config.max_run_disk_mb * 1024 * 1024)
        if limit and used > limit and run.id not in self._over_disk:
            self._over_disk[run.id] = (f"the run used {used / (1024 * 1024):.1f} MB of disk, more than the "
                                       f"{self.config.max_run_disk_mb:g} MB a run may use (max_run_disk_mb)")
            log.warning("run.over_disk", tenant=run.tenant, run=run.id, disk_bytes=used, limit=limit)

    async def _stop(self, run: Run, handle: Handle) -> None:
        """In the background: a stop waits for the run to end, and other runs must not wait with it."""
        log.info("run.cancelling", tenant=run.tenant, run=run.id)
        t0 = time.monotonic()
        try:
            await asyncio.to_thread(self.backend.stop, handle)
            log.info("run.stopped", tenant=run.tenant, run=run.id, took_s=round(time.monotonic() - t0, 3))
        except Exception as e:  # noqa: BLE001 - the next pass sees the state either way
            log.warning("run.stop_failed", tenant=run.tenant, run=run.id, error=_one_line(e))
        self.wake()

    def _tail(self, run: Run) -> Run:
        """Read what the run wrote since the last pass; fold, log, fan out; store the offset."""
        events, offset, seq = read_new(self.layout(run).dir, run.event_offset, run.event_seq)
        if offset == run.event_offset:
            return run
        cost, step = run.claimed_cost_usd, run.step
        claimed = self._claimed[run.id]
        for n, ev in events:
            if ev.kind == "checkpoint":
                self._checkpoints.add(run.id)
            elif ev.kind == "tool_call":
                claimed["tool_call"] += 1
            elif ev.kind == "audit":
                self._audit(run, ev)
            elif ev.kind == "step" and ev.text:
                step = _one_line(ev.text, 200)
            elif ev.kind == "result":
                cost += _claimed_cost(ev.payload.get("cost_usd"), 0.0)
            elif ev.kind == "ask":
                self.results.asked(run, ev)
            self._publish(run.id, n, ev)
        self.registry.update(run.id, event_offset=offset, event_seq=seq, claimed_cost_usd=cost, step=step)
        run.event_offset, run.event_seq, run.claimed_cost_usd, run.step = offset, seq, cost, step
        return run

    def _audit(self, run: Run, ev: Event) -> None:
        """An audit line ({"kind": "audit", "text": <deny|spill|spill_failed|isolate>, "payload": {...}})
        → one structured log line ``audit.<kind>`` with the tenant, the run and the claim's fields — ours by name
        (``sandbox.records.AuditClaim``): a run's payload keys never become log fields or keywords."""
        kind, claim = decode_audit(ev)
        if kind is None:
            audit_log.warning("audit.unrecognised", tenant=run.tenant, run=run.id, source="run",
                              claimed_kind=_one_line(ev.text, 64), step=ev.step or None)
            return
        if kind in ("deny", "spill"):
            self._claimed[run.id][kind] += 1
        self.metrics.audited(run.tenant, kind)
        level = "warning" if kind in ("deny", "spill_failed") else "info"
        getattr(audit_log, level)(f"audit.{kind}", tenant=run.tenant, run=run.id, source="run",
                                  step=ev.step or None, **claim.fields())

    # -- finishing ---------------------------------------------------------------------------
    async def _finish(self, run: Run, state: str, *, why: str | None = None) -> None:
        while True:  # everything it wrote before exiting, however much
            before = run.event_offset
            run = self._tail(run)
            if run.event_offset == before:
                break
        layout = self.layout(run)
        handle = self.handles.get(run.id)
        bad_exit: str | None = None
        try:
            exit_data = read_exit_record(layout.dir)
        except RecordError as e:
            exit_data, bad_exit = None, str(e)
        claimed = run.claimed_cost_usd
        error: str | None = None
        disk_full = False  # the run died for want of space: its reason says so, whatever it managed to write
        if exit_data is not None:
            claimed = _claimed_cost(exit_data.cost_usd, claimed) or claimed
        reason: FailureReason | None = None
        overspent = self._overspent.get(run.id)
        if overspent:
            status, error, reason = "failed", overspent, "budget"
        elif run.id in self._evicted:
            status, error, reason = "failed", self._evicted[run.id], "tenant_removed"
        elif run.id in self._over_disk:
            status, error, reason = "failed", self._over_disk[run.id], "disk"
        elif run.cancel_requested:
            status, error = "cancelled", "cancelled on request"
        elif exit_data is not None:
            status, error = exit_data.status, exit_data.error or None
            if status != "succeeded" and error and is_disk_full(error):
                self.health.disk_full_seen()
                disk_full = True
        elif bad_exit is not None:
            status, error = "failed", bad_exit
        elif state == "missing":
            status, error = "failed", why or "the run's sandbox disappeared without writing exit.json"
            reason = "vanished"
        else:
            code = None
            if handle is not None:
                try:
                    code = await asyncio.to_thread(self.backend.exit_code, handle)
                except Exception:  # noqa: BLE001
                    code = None
            status, reason = "failed", "crashed"
            error = f"the run exited with code {code} without writing exit.json (it crashed before finishing)"
            disk_full = self.health.disk_was_full(since=run.started or run.created)
        if reason is None and status in ("failed", "aborted", "killed"):
            reason = status  # type: ignore[assignment]
        commit, stat, notes = await asyncio.to_thread(self._collect, run, layout)
        if disk_full:
            error = disk_full_reason(self.health.disk(fresh=True), layout.branch if commit else None, error)
        branch = run.branch
        if status == "cancelled" and run.base and commit in (None, run.base):  # nothing handed back: no branch
            await asyncio.to_thread(self._discard_workspace, run, keep_branch=False)
            branch = None
        if notes:
            error = "; ".join([e for e in [error, *notes] if e])
        # the row first: if it cannot be written (a full disk), the next pass finishes the run again, sandbox and all
        used = await asyncio.to_thread(folder_bytes, layout.dir)
        ended = time.time()
        if self.registry.transition(run.id, status, frm=ACTIVE, ended=ended, claimed_cost_usd=claimed,
                                    error=error, commit_sha=commit, diffstat=stat, token_sha256=None, branch=branch,
                                    disk_bytes=used):
            self.metrics.finished(run.tenant, status, ended - run.started if run.started else None, reason)
        grant = await self.gateway.close(run.id)  # its token ends with it
        self._compare_audits(run, grant)
        row = self.registry.get(run.id)
        log.info("run.finished", tenant=run.tenant, run=run.id, status=status,
                 cost_usd=round(row.cost_usd, 6) if row else None, claimed_cost_usd=round(claimed, 6),
                 commit=commit, files=len(stat["files"]) if stat else None, error=error)
        # a run that went missing may have left processes (local: in its cgroup)
        leftover = handle or (Handle(run.handle) if run.handle else None)
        if leftover is not None:
            try:
                await asyncio.to_thread(self.backend.remove, leftover)
            except Exception as e:  # noqa: BLE001
                log.warning("run.remove_failed", tenant=run.tenant, run=run.id, error=_one_line(e))
        self._forget(run.id)
        self._publish_end(run.id)
        self.results.ended(run.id)
        self.wake()  # its slot is free: the next pass starts a queued run at once

    async def _evict(self, run: Run) -> None:
        """The run's tenant left the tenants file: its token ends now (not one more model call on the tenant's
        key), and the run is stopped with the reason."""
        why = (f"tenant {run.tenant} was removed from the tenants file; the service stopped its run and ended its "
               "model gateway token")
        self._evicted[run.id] = why
        await self.gateway.close(run.id)
        log.warning("run.tenant_removed", tenant=run.tenant, run=run.id, error=why)

    async def _poisoned(self, run: Run, error: BaseException) -> None:
        """Handling this run's output failed: the run ends alone — failed with the reason named, its quota, token
        and sandbox released — and the scheduler and every other run go on. Each step on its own: a step that
        fails too must not keep the others from releasing what the run holds."""
        why = (f"the service could not handle this run's output ({type(error).__name__}: {_one_line(error, 300)});"
               " the run was stopped")
        log.error("run.poisoned", tenant=run.tenant, run=run.id, error=why)
        await self._end_alone(run, why, "poisoned")

    async def _end_alone(self, run: Run, why: str, reason: FailureReason) -> None:
        """End a run without reading anything it wrote: row failed, token ended, sandbox and checkout removed."""
        handle = self.handles.get(run.id) or (Handle(run.handle) if run.handle else None)
        try:
            ended = await asyncio.to_thread(self.registry.transition, run.id, "failed", frm=ACTIVE,
                                            ended=time.time(), error=why, token_sha256=None)
        except Exception as e:  # noqa: BLE001 - the rest is released all the same; the next pass retries the row
            log.warning("run.release_failed", tenant=run.tenant, run=run.id, step="row", error=_one_line(e))
        else:
            if ended:
                self.metrics.finished(run.tenant, "failed", time.time() - run.started if run.started else None,
                                      reason)
        await self.gateway.close(run.id)
        releases: list[tuple[str, Callable[[], object]]] = [
            ("env file", lambda: self.layout(run).env_file.unlink(missing_ok=True)),
            ("checkout", lambda: self._discard_workspace(run, keep_branch=True))]
        if handle is not None:
            releases.insert(0, ("sandbox", lambda: self.backend.remove(handle)))
        for what, release in releases:
            try:
                await asyncio.to_thread(release)
            except Exception as e:  # noqa: BLE001
                log.warning("run.release_failed", tenant=run.tenant, run=run.id, step=what, error=_one_line(e))
        self._forget(run.id)
        self._publish_end(run.id)
        self.results.ended(run.id)
        self.wake()

    def _forget(self, run_id: str) -> None:
        """Whatever the scheduler held for a run that ended."""
        self.handles.pop(run_id, None)
        self._stopping.pop(run_id, None)
        self._imported.pop(run_id, None)
        self._measured.pop(run_id, None)
        self._over_disk.pop(run_id, None)
        self._overspent.pop(run_id, None)
        self._evicted.pop(run_id, None)
        self._claimed.pop(run_id, None)
        self._checkpoints.discard(run_id)
        self.backoff.succeeded(run_id)

    def _compare_audits(self, run: Run, grant: Grant | None) -> None:
        """The wire's counts against the run's own: a run that hid (or invented) a denial shows up here."""
        claimed = self._claimed.pop(run.id, Counter())
        if grant is None:
            return
        wire = grant.counts
        if any(wire[k] != claimed[k] for k in ("deny", "spill")) or wire["tool_call"] < claimed["tool_call"]:
            audit_log.warning("audit.mismatch", tenant=run.tenant, run=run.id,
                              wire_denials=wire["deny"], run_denials=claimed["deny"],
                              wire_spills=wire["spill"], run_spills=claimed["spill"],
                              wire_tool_calls=wire["tool_call"], run_tool_calls=claimed["tool_call"])

    def _collect(self, run: Run, layout: RunLayout) -> tuple[str | None, dict[str, Any] | None, list[str]]:
        """Blocking: take the run's last bundle, measure the diff, remove its credentials and checkout."""
        from sandbox.worktree import diff_files

        notes: list[str] = []
        commit: str | None = None
        try:
            commit = self._take_work(run, layout, raise_errors=True)
        except Exception as e:  # noqa: BLE001
            notes.append(f"the run's work was not taken ({type(e).__name__}: {_one_line(e, 300)})")
        stat = None
        if run.base:
            try:
                stat = diffstat(diff_files(run.repo, layout.branch, base=run.base))
            except Exception as e:  # noqa: BLE001
                notes.append(f"reading the diff failed ({type(e).__name__}: {_one_line(e, 200)})")
        layout.env_file.unlink(missing_ok=True)
        if self.config.remove_worktree:
            self._discard_workspace(run, keep_branch=True)
        return commit, stat, notes

    def _take_work(self, run: Run, layout: RunLayout, *, raise_errors: bool = False) -> str | None:
        """Blocking: copy the run's work bundle out of its reach, verify it and fetch it into ``flower/<run>``;
        the branch's tip (None when the run handed nothing back). A bundle already taken is not taken again."""
        from sandbox.runfiles import copy_out, open_file
        from sandbox.worktree import import_bundle

        if not run.base:
            return None
        rel = "outbox/work.bundle"
        try:
            with open_file(layout.dir, rel) as fd:
                st = os.fstat(fd)
        except FileNotFoundError:
            return run.commit_sha
        except OSError as e:
            if raise_errors:
                raise
            log.warning("run.bundle_refused", tenant=run.tenant, run=run.id, error=_one_line(e))
            return run.commit_sha
        stamp = (st.st_ino, st.st_size, st.st_mtime_ns)
        if self._imported.get(run.id) == stamp:
            return run.commit_sha
        copy = self._bundle_copy(run)
        try:
            try:
                copy_out(layout.dir, rel, copy, limit=self.config.max_bundle_mb * 1024 * 1024)
            except OSError as e:  # the data dir is full: the work still goes home, through the system's temp dir
                if not is_disk_full(e):
                    raise
                copy.unlink(missing_ok=True)
                copy = self._bundle_copy(run, system=True)
                copy_out(layout.dir, rel, copy, limit=self.config.max_bundle_mb * 1024 * 1024)
            tip = import_bundle(run.repo, copy, layout.branch, base=run.base)
        except Exception as e:  # noqa: BLE001 - a bad bundle is the run's failure, never the service's
            if is_disk_full(e):  # the machine's, not the run's: taken again on a later pass
                raise
            self._imported[run.id] = stamp
            audit_log.warning("audit.bundle_refused", tenant=run.tenant, run=run.id, error=_one_line(e, 300))
            if raise_errors:
                raise
            return run.commit_sha
        finally:
            copy.unlink(missing_ok=True)
            if copy.parent.name.startswith("flower-bundle-"):
                copy.parent.rmdir()
        self.registry.update(run.id, commit_sha=tip)  # may fail on a full disk: then the bundle is taken again
        self._imported[run.id] = stamp
        run.commit_sha = tip
        log.info("run.checkpoint", tenant=run.tenant, run=run.id, commit=tip)
        return tip

    def _bundle_copy(self, run: Run, *, system: bool = False) -> Path:
        """Where a bundle is copied before git reads it: out of the run's reach, on the data dir (or the system's
        temp dir when the data dir has no room left)."""
        import tempfile

        if system:
            return Path(tempfile.mkdtemp(prefix="flower-bundle-")) / f"{run.id}.bundle"
        tmp = self.config.data_path / "tmp"
        tmp.mkdir(mode=0o700, exist_ok=True)
        return tmp / f"{run.id}.bundle"

    def _discard_workspace(self, run: Run, *, keep_branch: bool, strict: bool = False) -> None:
        from sandbox.worktree import delete_branch, remove_workspace

        layout = self.layout(run)
        remove_workspace(layout.workspace)
        if not keep_branch:
            try:
                delete_branch(run.repo, layout.branch)
            except Exception as e:  # noqa: BLE001
                if strict:
                    raise
                log.warning("run.branch_remove_failed", tenant=run.tenant, run=run.id, error=_one_line(e))

    # -- retention ---------------------------------------------------------------------------
    async def delete(self, run: Run, *, branch: bool) -> Run:
        """Remove an ended run's folder (and its branch when asked); its row stays, marked deleted. A run that
        is not ended is never touched (ValueError)."""
        current = self.registry.get(run.id)
        if current is None or not current.terminal or current.id in self.handles:
            raise ValueError(f"run {run.id} has not ended: nothing of a live run is removed")
        notes = await asyncio.to_thread(remove_run_files, self.layout(current))
        fields: dict[str, Any] = {"disk_bytes": 0 if not notes else None}
        if current.deleted is None:
            fields["deleted"] = self.clock()
        if branch and current.branch:
            try:
                await asyncio.to_thread(self._discard_workspace, current, keep_branch=False, strict=True)
                fields["branch"] = None
            except Exception as e:  # noqa: BLE001 - the files are gone either way; say what stayed
                notes.append(f"the branch {current.branch} stayed: {_one_line(e, 200)}")
        if notes:
            log.warning("run.delete_incomplete", tenant=current.tenant, run=current.id, left=notes)
        self.registry.update(current.id, only_if=[current.status], **fields)
        done = self.registry.get(current.id)
        assert done is not None
        return done

    async def sweep(self) -> list[str]:
        """Delete the files of runs that ended more than ``retain_days`` ago (their branches stay)."""
        if not self.config.retain_days:
            return []
        cutoff = self.clock() - self.config.retain_days * 86400
        gone = []
        for run in self.registry.list(ended_before=cutoff, deleted=False, oldest_first=True):
            if run.terminal:
                await self.delete(run, branch=False)
                gone.append(run.id)
        if gone:
            log.info("runs.retention", deleted=len(gone), retain_days=self.config.retain_days)
        return gone

    def _fail(self, run: Run, error: str, *, frm: Any = ACTIVE) -> None:
        self.registry.transition(run.id, "failed", frm=frm, ended=time.time(), error=error)
        log.warning("run.failed", tenant=run.tenant, run=run.id, error=error)
        self._publish_end(run.id)
        self.results.ended(run.id)

    # -- the mailbox -------------------------------------------------------------------------
    def questions(self, run: Run) -> list[Question]:
        """Blocking: the run's open questions, read as hostile data — well-formed ones only, oldest first."""
        from sandbox.runfiles import list_files, read_file

        folder = self.layout(run).dir
        out = []
        for name in list_files(folder, "outbox/questions", suffix=".json", most=100):
            try:
                q = decode_question(read_file(folder, f"outbox/questions/{name}", limit=QUESTION_BYTES))
            except OSError:
                continue
            if q is not None and q.id == name[:-5] and QUESTION_ID.fullmatch(q.id):
                out.append(q)
        return out

    def mail(self, run: Run, rel: str, doc: dict[str, Any]) -> None:
        """Blocking: write one mailbox file (answers/…, inbox/…, interrupt.json) where the run can read it but
        never replace it; owned by the run's uid when the backend runs it as another one."""
        import json

        from sandbox.runfiles import write_file

        owner = self.backend.mail_owner()
        write_file(self.layout(run).mailbox, rel, json.dumps(doc, ensure_ascii=False).encode("utf-8"), owner=owner)

    # -- cancelling --------------------------------------------------------------------------
    def request_cancel(self, run_id: str) -> None:
        """Queued runs end at once; starting/running ones are stopped on the next pass."""
        if self.registry.transition(run_id, "cancelled", frm=["queued"], ended=time.time(),
                                    error="cancelled on request", cancel_requested=True):
            self._publish_end(run_id)
        else:
            self.registry.update(run_id, only_if=ACTIVE, cancel_requested=True)
        self.wake()

    # -- fan-out -----------------------------------------------------------------------------
    def subscribe(self, run_id: str) -> asyncio.Queue[Any]:
        q: asyncio.Queue[Any] = asyncio.Queue(maxsize=_SUB_QUEUE)
        self._subs[run_id].add(q)
        return q

    def unsubscribe(self, run_id: str, q: asyncio.Queue[Any]) -> None:
        subs = self._subs.get(run_id)
        if subs is not None:
            subs.discard(q)
            if not subs:
                self._subs.pop(run_id, None)

    def _publish(self, run_id: str, seq: int, ev: Event) -> None:
        for q in list(self._subs.get(run_id, ())):
            try:
                q.put_nowait((seq, ev))
            except asyncio.QueueFull:  # a stalled client: it re-reads from the file when it catches up
                pass

    def _publish_end(self, run_id: str) -> None:
        for q in list(self._subs.get(run_id, ())):
            try:
                q.put_nowait(END)
            except asyncio.QueueFull:
                try:
                    q.get_nowait()
                    q.put_nowait(END)
                except (asyncio.QueueEmpty, asyncio.QueueFull):
                    pass
