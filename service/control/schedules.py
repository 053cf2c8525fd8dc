"""Scheduled asks: a tenant's ask fired at the ticks of a cron expression read in a timezone, each tick once across
replicas, with a budget per run and a rule for a tick that comes while the last run is still live.

Each pass (``fire_due``) a replica looks for due ticks and holds one before firing it (``SchedulesTable.hold``: like
a run's lease, with a generation as its fencing token). Firing a tick writes its fire row, then queues its run under
an id derived from the schedule and the tick (``tick_run_id``), then moves the schedule to its next tick — each
write fenced by the hold. A replica that dies anywhere in between leaves the tick held until the hold runs out; the
replica that takes it next finds the fire row and the run already there and only finishes the tick: a tick is never
fired twice, and never lost.

Catch-up: a tick missed while the service was down (or the schedule's run waited) fires once, late, and the
schedule moves on to its first tick after now — at most one late run, never a burst. Overlap, when the last run of
the schedule has not ended: "skip" records the tick as skipped, "queue" leaves it due until that run ends (at most
one waits), "cancel" asks that run to stop and starts the new one.

    ServiceError
    └── BadSchedule   a cron expression, timezone or budget that cannot be scheduled (400) (ValueError)
"""

from __future__ import annotations

import asyncio
import hashlib
import secrets
import time
from collections.abc import Callable
from datetime import datetime
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import msgspec
from croniter import croniter

from ..clock import SYSTEM, Clock
from ..config import ServiceConfig
from ..errors import ServiceError, TenantNotReady
from ..logging import get_logger
from ..registry import RunsTable, SchedulesTable
from ..registry.schedules import Fire, FiredBy, Outcome, Overlap, Schedule
from ..tenants import Tenant, Tenants
from .admission import Admission, BadSubmit, DiskLow, NotTakingRuns, QueueFull, unstorable

__all__ = ["Schedules", "BadSchedule", "next_tick", "check_cron", "tick_run_id", "SAMPLED_TICKS"]

log = get_logger("flower.service.schedules")

SAMPLED_TICKS = 200
"""How many ticks ahead ``check_cron`` measures the gaps between (a cron's shortest gap is within a year of them)."""
HOLD_S = 60.0
"""How long a tick stays held by a replica that fires it (it takes a second): past it, another replica fires it."""


class BadSchedule(ServiceError, ValueError):
    """A cron expression, timezone or budget that cannot be scheduled; the message says which and how."""


def zone(name: str) -> ZoneInfo:
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError):  # (a folder of zones, a name too long for a file)
        raise BadSchedule(f"timezone {name[:100]!r} does not exist: give an IANA name such as 'UTC', "
                          "'Europe/Paris' or 'America/New_York'") from None


def next_tick(cron: str, timezone: str, after: float) -> float:
    """The first tick of ``cron`` (read in ``timezone``) strictly after ``after`` (seconds since the epoch)."""
    start = datetime.fromtimestamp(after, zone(timezone))
    return float(croniter(cron, start).get_next(float))


def check_cron(cron: str, timezone: str, *, min_interval_s: float, now: float) -> float:
    """The first tick after ``now``, or BadSchedule: ``cron`` does not parse, or two of its ticks come closer than
    ``min_interval_s`` (measured over the next ``SAMPLED_TICKS``)."""
    tz = zone(timezone)
    if not isinstance(cron, str) or not croniter.is_valid(cron) or len(cron.split()) != 5:
        raise BadSchedule(f"cron expression {cron[:100]!r} does not parse: give five fields (minute hour "
                          "day-of-month month day-of-week), e.g. '0 3 * * *' for 03:00 every day")
    try:
        it = croniter(cron, datetime.fromtimestamp(now, tz))
        ticks = [float(it.get_next(float)) for _ in range(SAMPLED_TICKS)]
    except Exception:  # noqa: BLE001 - croniter's own errors: a day that never comes (31 February)
        raise BadSchedule(f"cron expression {cron!r} never fires (a day that does not exist?): check its "
                          "day-of-month and month fields") from None
    gap = min(b - a for a, b in zip(ticks, ticks[1:]))
    if gap < min_interval_s:
        raise BadSchedule(f"cron expression {cron!r} fires every {gap:g} s at times, more often than this tenant "
                          f"may schedule (every {min_interval_s:g} s at most): space its ticks out")
    return ticks[0]


def tick_run_id(schedule_id: str, tick: float) -> str:
    """The run a tick starts: the same for the same tick, whichever replica fires it (and however often)."""
    digest = hashlib.sha256(f"{schedule_id}\0{tick!r}".encode()).hexdigest()[:32]
    return time.strftime("%Y%m%d-%H%M%S", time.gmtime(tick)) + "-" + digest


def new_schedule_id() -> str:
    return "sch-" + secrets.token_hex(12)


class Schedules:
    """A tenant's schedules (create, pause, delete) and the firing of their due ticks, one pass at a time
    (``fire_due``) or in a loop of its own (``start``)."""

    def __init__(self, config: ServiceConfig, table: SchedulesTable, runs: RunsTable, tenants: Tenants,
                 admission: Admission, cancel: Callable[[str], None], *, owner: str, clock: Clock = SYSTEM,
                 every_s: float = 1.0) -> None:
        self.config, self.table, self.runs, self.tenants = config, table, runs, tenants
        self.admission, self._cancel, self.owner, self.clock = admission, cancel, owner, clock
        self.every_s = every_s
        self._task: asyncio.Task[None] | None = None
        self._stop = asyncio.Event()

    # -- what a tenant asks --------------------------------------------------------------------
    def min_interval_s(self, tenant: Tenant) -> float:
        return tenant.schedule_min_interval_s or self.config.schedule_min_interval_s

    def create(self, tenant: Tenant, *, ask: str, options: dict[str, object], cron: str | None, timezone: str,
               budget_usd: float | None, overlap: Overlap, trigger_sha256: str | None = None) -> Schedule:
        """A new schedule of ``tenant`` (``cron`` None: a saved ask its trigger alone fires), or BadSchedule."""
        now = self.clock.now()
        zone(timezone)
        first = check_cron(cron, timezone, min_interval_s=self.min_interval_s(tenant), now=now) \
            if cron is not None else None
        if budget_usd is not None and tenant.budget_usd.run is not None and budget_usd > tenant.budget_usd.run:
            raise BadSchedule(f"budget_usd {budget_usd:g} is more than tenant {tenant.name}'s per-run budget "
                              f"({tenant.budget_usd.run:g}), which still applies: give at most that")
        ask = ask.strip()
        if not ask:
            raise BadSchedule("`ask` is blank: say what each run should do")
        bad = unstorable(ask)
        if bad:
            raise BadSchedule(f"`ask` holds {bad}, which no run can be given: remove it and try again")
        try:
            tenant.check_options(dict(options))
        except TenantNotReady as e:
            raise BadSchedule(str(e)) from None
        made = self.table.create(id=new_schedule_id(), tenant=tenant.name, ask=ask, options=dict(options),
                                 cron=cron, timezone=timezone, budget_usd=budget_usd, overlap=overlap,
                                 created=now, next_at=first, trigger_sha256=trigger_sha256)
        log.info("schedule.created", tenant=tenant.name, schedule=made.id, cron=cron, timezone=timezone,
                 next_at=first)
        return made

    def pause(self, schedule: Schedule, paused: bool) -> Schedule:
        """Paused: no tick fires. Resumed: from its first tick after now (the ticks missed meanwhile are not run)."""
        following = next_tick(schedule.cron, schedule.timezone, self.clock.now()) \
            if schedule.cron is not None and not paused else schedule.next_at
        done = self.table.pause(schedule.id, paused, next_at=following)
        log.info("schedule.paused" if paused else "schedule.resumed", tenant=schedule.tenant, schedule=schedule.id)
        return done or schedule

    # -- the ticks --------------------------------------------------------------------------------
    async def fire_due(self) -> list[Fire]:
        """One pass: every due tick no other replica holds, held and fired; what each did."""
        done: list[Fire] = []
        for due in await asyncio.to_thread(self.table.due, now=self.clock.now()):
            assert due.next_at is not None
            held = await asyncio.to_thread(self.table.hold, due.id, due.next_at, self.owner,
                                           now=self.clock.now(), ttl=HOLD_S)
            if held is None:
                continue  # another replica holds it, or fired it a moment ago
            fire = await self.fire(held)
            if fire is not None:
                done.append(fire)
        return done

    async def fire(self, held: Schedule) -> Fire | None:
        """Fire the held schedule's due tick; None when it stays due (its last run still lives and it queues) or
        the hold was lost (another replica finishes the tick)."""
        assert held.next_at is not None and held.cron is not None
        tick, now = held.next_at, self.clock.now()
        following = next_tick(held.cron, held.timezone, max(now, tick))  # the missed ones are not run
        live = await asyncio.to_thread(self.table.live_run, held)
        run_id = tick_run_id(held.id, tick)
        if live is not None and live != run_id:
            if held.overlap == "queue":
                await asyncio.to_thread(self.table.let_go, held)  # due again at the next pass: fires once it ended
                return None
            if held.overlap == "skip":
                fire = self._fire_row(held, tick, None, "schedule", "skipped",
                                      f"run {live} of this schedule is still live (overlap: skip)")
                return await self._done(held, fire, following, last_run=None)
            self._cancel(live)  # overlap: cancel — it stops; the new run starts now
            log.info("schedule.cancelled_last", tenant=held.tenant, schedule=held.id, run=live)
        started = await self.start(held, tick, "schedule", held.ask)
        if started is None:
            return None
        return await self._done(held, started, following, last_run=started.run)

    async def start(self, held: Schedule, tick: float, fired_by: FiredBy, ask: str) -> Fire | None:
        """Record the fire ("firing": the gateway finds the run's budget there from its first call) and queue its
        run (unless a former holder did already); the fire "started", or None: the hold was lost."""
        run_id = tick_run_id(held.id, tick)
        fire = await asyncio.to_thread(self.table.record, self._fire_row(held, tick, run_id, fired_by, "firing"))
        if fire.outcome in ("skipped", "refused") or fire.run is None:
            return fire
        if await asyncio.to_thread(self.runs.get, fire.run) is None:  # else a former holder queued it, then died
            if not await asyncio.to_thread(self.table.still_held, held):
                return None
            refused = await self._submit(held, fire, ask)
            if refused is not None:
                return refused
        await asyncio.to_thread(self.table.started, held.id, tick)
        log.info("schedule.fired", tenant=held.tenant, schedule=held.id, tick=tick, run=fire.run, by=fired_by)
        return msgspec.structs.replace(fire, outcome="started")

    async def _submit(self, held: Schedule, fire: Fire, ask: str) -> Fire | None:
        """Queue the fire's run; the fire as refused when the service would not (None: queued)."""
        tick = fire.tick
        tenant = self.tenants.get(held.tenant)
        try:
            if tenant is None:
                raise TenantNotReady(f"tenant {held.tenant} is no longer in the tenants file")
            await self.admission.submit(tenant, ask, dict(held.options), run_id=fire.run)
        except (NotTakingRuns, BadSubmit, QueueFull, DiskLow, TenantNotReady) as e:
            why = f"no run was queued: {e}"
            await asyncio.to_thread(self.table.refused, held.id, tick, why)
            log.warning("schedule.refused", tenant=held.tenant, schedule=held.id, tick=tick, error=why)
            return msgspec.structs.replace(fire, run=None, outcome="refused", why=why)
        return None

    def _fire_row(self, held: Schedule, tick: float, run: str | None, fired_by: FiredBy, outcome: Outcome,
                  why: str | None = None) -> Fire:
        return Fire(schedule=held.id, tick=tick, tenant=held.tenant, run=run, fired_by=fired_by, outcome=outcome,
                    why=why, budget_usd=held.budget_usd, at=self.clock.now())

    async def _done(self, held: Schedule, fire: Fire, following: float, *, last_run: str | None) -> Fire | None:
        if fire.outcome == "skipped":
            fire = await asyncio.to_thread(self.table.record, fire)
        moved = await asyncio.to_thread(self.table.advance, held, following, last_run=last_run)
        return fire if moved else None

    # -- the loop -------------------------------------------------------------------------------
    def start_loop(self) -> None:
        """Fire due ticks every ``every_s`` until ``stop``; a pass that fails is logged and tried again."""
        self._stop.clear()
        self._task = asyncio.get_running_loop().create_task(self._loop(), name="flower-schedules")

    async def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                await self.fire_due()
            except Exception as e:  # noqa: BLE001 - the registry away a moment: the next pass tries again
                log.warning("schedule.pass_failed", error=f"{type(e).__name__}: {str(e)[:300]}")
            try:  # not wait_for: on 3.11 it can swallow a cancel (service/control/scheduler.py)
                async with asyncio.timeout(self.every_s):
                    await self._stop.wait()
            except TimeoutError:
                pass

    async def stop(self) -> None:
        self._stop.set()
        if self._task is not None:
            await self._task
            self._task = None

