"""The warm pool's keeper: sandboxes started ahead, of every tenant's shape, so a run's start is a claim.

It owns the fill: one at a time in a worker thread, ``REFILL_AFTER_S`` after a claim (a new sandbox's imports —
a second of CPU — would otherwise compete with the claimed run's CLI start), and a check every ``WARM_CHECK_S``
that replaces a waiting sandbox that died and retries a start that failed. A fill yields while runs are starting
(started in the last ``BOOT_S``, no model request yet), at least one per core — a burst, whose starts alone keep
every core busy: it starts no sandbox then, and looks again every ``YIELD_S``. No warm sandbox is a slower start,
never a refusal: its failures are logged, not raised.

With several replicas (PostgreSQL), each keeps a pool of its own, its slots named for it, and holds a lease in the
registry that says it is alive (``warm-pool:<owner>``, renewed with its runs' leases): every ``WARM_CHECK_S`` a
replica takes over the lease of any other pool it finds slots of whose replica stopped renewing — it died — and
removes what that pool left waiting, as ``service.control.leases`` takes over a dead replica's runs.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
from pathlib import Path

from sandbox.backends.base import Backend, WarmBackend
from sandbox.pool import Shape, Slot, WarmPool

from ..clock import SYSTEM, Clock
from ..logging import get_logger
from ..metrics import Metrics
from ..registry import Lease, LeasesTable, RunsTable
from ..tenants import Tenants
from .backoff import RepeatLog
from .environments import Environments
from .runenv import settings_of

__all__ = ["WarmKeeper", "WARM_CHECK_S", "REFILL_AFTER_S", "BOOT_S", "YIELD_S"]

log = get_logger("flower.service.scheduler")

WARM_CHECK_S = 30.0  # how often the warm pool's waiting sandboxes are checked (and a failed start retried)
REFILL_AFTER_S = 3.0  # a claim refills the pool this much later: a new sandbox's imports (a second of CPU) would
# otherwise compete with the claimed run's CLI start, which is over by then
BOOT_S = 60.0  # a run started this long ago that has sent no model request yet is not starting: it is stuck
YIELD_S = 1.0  # a fill that yielded to starting runs looks again this much later


class WarmKeeper:
    def __init__(self, pool: WarmPool | None, runs: RunsTable, leases: LeasesTable, tenants: Tenants, metrics: Metrics,
                 errors: RepeatLog, *, replica: str | None = None, lease_s: float = 20.0,
                 clock: Clock = SYSTEM) -> None:
        self.clock = clock
        self.pool = pool
        self.replica = replica
        """This replica's name on its pool's lease (None: the only replica, nothing to reap)."""
        self.lease_s = lease_s
        self._next_reap = 0.0
        self.runs = runs
        self.leases = leases
        self.tenants = tenants
        self.metrics = metrics
        self.errors = errors
        self._loop: asyncio.AbstractEventLoop | None = None
        self._filling: asyncio.Task[int] | None = None
        self._next_check = 0.0
        self._yielded = False
        self.environments: Environments | None = None
        """The teams' prepared environments (the launcher's): a tenant's sandboxes wait in its latest one."""
        if pool is not None:
            pool.on_error = self._failed

    @classmethod
    def of(cls, backend: Backend, runs_root: Path, size: int, runs: RunsTable, leases: LeasesTable,
           tenants: Tenants,
           metrics: Metrics, errors: RepeatLog, *, replica: str | None = None, lease_s: float = 20.0,
           clock: Clock = SYSTEM) -> WarmKeeper:
        """A keeper with a pool of ``size`` per shape when the backend can start sandboxes ahead, else none.
        ``replica``: this replica's name, when several may share the runs' folder (PostgreSQL) — its slots carry a
        hash of it, so a replica starting sweeps only what it left itself, and reaps what a dead one left once its
        pool's lease (``lease_s``) ran out; None (SQLite: one replica, whatever its host's name is after a restart)
        sweeps every waiting sandbox."""
        owner = hashlib.sha256(replica.encode()).hexdigest()[:8] if replica is not None else ""
        pool = WarmPool(backend, runs_root, size, owner=owner) if size and isinstance(backend, WarmBackend) else None
        return cls(pool, runs, leases, tenants, metrics, errors, replica=replica, lease_s=lease_s, clock=clock)

    def bind(self, loop: asyncio.AbstractEventLoop) -> None:
        """The loop fills are started on (the service's)."""
        self._loop = loop

    async def sweep(self) -> None:
        """What a previous service left waiting goes (the first fill wants every tenant's shape)."""
        if self.pool is not None:
            await asyncio.to_thread(self._sweep, self.pool)

    async def stop(self) -> None:
        """A waiting sandbox holds memory and nothing else: it goes with the service."""
        if self._filling is not None:
            self._filling.cancel()
            await asyncio.gather(self._filling, return_exceptions=True)
        if self.pool is not None:
            await asyncio.to_thread(self.pool.close)

    def claim(self, shape: Shape) -> Slot | None:
        """Blocking: a waiting sandbox of the run's shape, if the pool has one; the pool refills either way."""
        if self.pool is None:
            return None
        slot = self.pool.claim(shape)
        self.metrics.warm.labels("hit" if slot is not None else "miss").inc()
        assert self._loop is not None
        self._loop.call_soon_threadsafe(self._loop.call_later, REFILL_AFTER_S, self.refill)
        return slot

    def discard(self, slot: Slot) -> None:
        """Blocking: a claimed slot whose run did not start goes."""
        assert self.pool is not None
        self.pool.discard(slot)

    def check_due(self) -> None:
        """A pass's share: every ``WARM_CHECK_S`` a waiting sandbox that died is replaced, a failed start retried."""
        if self.pool is not None and self.clock.monotonic() >= self._next_check:
            self._next_check = self.clock.monotonic() + WARM_CHECK_S
            self.refill()

    def _sweep(self, pool: WarmPool) -> None:
        self._alive()
        removed = pool.sweep(keep=self.runs.folders().__contains__)
        if removed:
            log.info("warm.swept", sandboxes=removed, why="started by an earlier service")

    @staticmethod
    def _lease_of(owner: str) -> str:
        return f"warm-pool:{owner}"

    def _alive(self) -> None:
        """Blocking: this replica's pool's lease, taken (again: another replica may have taken it over while this one
        could not renew it); the leases' renewer keeps it from then on."""
        if self.pool is not None and self.replica is not None:
            self.leases.take(self._lease_of(self.pool.owner), self.replica, ttl=self.lease_s, now=self.clock.now())

    def _reap_due(self, pool: WarmPool) -> None:
        """Blocking, every ``WARM_CHECK_S``: what the pools of dead replicas left waiting goes."""
        if self.replica is None or self.clock.monotonic() < self._next_reap:
            return
        self._next_reap = self.clock.monotonic() + WARM_CHECK_S
        self._alive()
        taken: list[Lease] = []

        def alive(owner: str) -> bool:  # its lease taken here: its replica renews it no more
            lease = self.leases.take(self._lease_of(owner), self.replica or "", ttl=self.lease_s,
                                       now=self.clock.now())
            if lease is not None:
                taken.append(lease)
            return lease is None

        try:
            removed = pool.reap(alive, keep=self.runs.folders().__contains__)
        finally:
            for lease in taken:
                self.leases.release(lease)
        if removed:
            log.info("warm.reaped", sandboxes=removed, owners=len(taken),
                     why="waiting sandboxes of a replica that stopped renewing its pool's lease (it died)")

    def _fill(self, pool: WarmPool) -> int:
        """Blocking: the pool keeps the shapes of the tenants there are now (the tenants file is re-read when it
        changes: a new tenant gets waiting sandboxes, a removed one's go), then tops them up."""
        from sandbox.worktree import objects_dir

        self._yielded = False
        if self._runs_starting():  # asked again every YIELD_S in a burst: nothing read, nothing probed, until it ends
            return 0
        try:
            self._reap_due(pool)
        except Exception as e:  # noqa: BLE001 - what a dead replica left waits for the next check; the fill goes on
            self.errors.error("warm.reap_failed", "warm-reap", e)
        else:
            self.errors.ok("warm-reap")
        shapes: set[Shape] = set()
        for tenant in self.tenants.all():
            key = f"warm:{tenant.name}"
            try:
                environment = None
                if self.environments is not None and self.environments.wanted(tenant, tenant.repo):
                    environment = self.environments.latest.get(tenant.name)
                    if environment is None:  # none prepared yet: its first run prepares it, then sandboxes wait
                        continue
                shapes.add(Shape.of(Path(tenant.repo).name, str(objects_dir(tenant.repo)), tenant.egress,
                                    settings_of(tenant.check_ready()), environment))
            except Exception as e:  # noqa: BLE001 - a tenant whose repo is not ready gets no warm sandbox
                self.errors.error("warm.tenant_skipped", key, e, tenant=tenant.name)
            else:
                self.errors.ok(key)
        pool.retain(shapes)
        return pool.fill(yield_to=self._runs_starting)

    def _runs_starting(self) -> bool:
        starting = self.runs.booting(self.clock.now() - BOOT_S) >= len(os.sched_getaffinity(0))
        self._yielded = self._yielded or starting
        return starting

    def refill(self) -> None:
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
            self._failed(None, error)
            return
        full = self.pool is None or all(n >= self.pool.size for n in self.pool.waiting().values())
        if self._yielded and not full:
            assert self._loop is not None
            self._loop.call_later(YIELD_S, self.refill)
        elif task.result() and not full:
            self.refill()  # claimed while it filled
        elif full:
            self.errors.ok("warm")
        # a fill that started nothing and left the pool short failed: the periodic check (WARM_CHECK_S) retries

    def _failed(self, shape: Shape | None, error: BaseException) -> None:
        self.errors.error("warm.start_failed", "warm", error, repo=shape.repo_name if shape else None)
