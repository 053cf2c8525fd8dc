"""A tenant's scheduled asks and what their ticks and triggers did (``schedules``, ``fires``).

A due tick is held like a run's lease (``hold``: a holder until ``expires``, the ``generation`` its fencing token),
so one replica fires it; whatever it writes after (``record``, ``advance``) carries that generation, and a replica
that was paused or killed past its hold writes nothing once another took the tick. ``service.control.schedules``
fires them.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, Literal

import msgspec
from sqlalchemy import RowMapping, delete, func, or_, select, update

from . import dialects
from .db import Database
from .rows import TERMINAL, plain
from .tables import fires, runs, schedules

__all__ = ["SchedulesTable", "Schedule", "Fire", "Overlap", "FiredBy", "Outcome", "OVERLAPS"]

Overlap = Literal["skip", "queue", "cancel"]
"""What a tick does while the schedule's last run is still live: nothing (skip), wait for it to end and then start
(queue: at most one waits), or cancel it and start (cancel)."""
OVERLAPS: tuple[Overlap, ...] = ("skip", "queue", "cancel")
FiredBy = Literal["schedule", "trigger"]
Outcome = Literal["firing", "started", "skipped", "refused"]
"""A fire is "firing" from when it is recorded until its run is queued ("started"), or the service would not queue
it ("refused"); "skipped": its schedule's last run was still live (overlap: skip)."""


class Schedule(msgspec.Struct, kw_only=True, frozen=True):
    id: str
    tenant: str
    ask: str
    options: dict[str, Any]
    cron: str | None
    """None: a saved ask fired only by its trigger."""
    timezone: str
    budget_usd: float | None
    overlap: Overlap
    paused: bool
    created: float
    next_at: float | None
    holder: str | None = None
    generation: int = 0
    expires: float | None = None
    trigger_sha256: str | None = None
    last_run: str | None = None


class Fire(msgspec.Struct, kw_only=True, frozen=True):
    """One tick or trigger of a schedule: the run it started (``outcome`` "started"), or why none."""
    schedule: str
    tick: float
    tenant: str
    run: str | None
    fired_by: FiredBy
    outcome: Outcome
    why: str | None
    budget_usd: float | None
    at: float


def _schedule(row: RowMapping) -> Schedule:
    values = plain(row)
    values["options"] = json.loads(values["options"] or "{}")
    values["paused"] = bool(values["paused"])
    return msgspec.convert(values, Schedule)


def _fire(row: RowMapping) -> Fire:
    return msgspec.convert(plain(row), Fire)


class SchedulesTable:
    def __init__(self, db: Database) -> None:
        self._db = db

    # -- the schedules ----------------------------------------------------------------------------
    def create(self, *, id: str, tenant: str, ask: str, options: dict[str, Any], cron: str | None, timezone: str,
               budget_usd: float | None, overlap: Overlap, created: float, next_at: float | None,
               trigger_sha256: str | None = None) -> Schedule:
        q = schedules.insert().values(id=id, tenant=tenant, ask=ask, options=json.dumps(options, ensure_ascii=False),
                                      cron=cron, timezone=timezone, budget_usd=budget_usd, overlap=overlap,
                                      created=created, next_at=next_at, trigger_sha256=trigger_sha256)
        with self._db.statement() as t:
            row = t.execute(q.returning(*schedules.c)).mappings().one()
        return _schedule(row)

    def get(self, schedule_id: str, *, tenant: str | None = None) -> Schedule | None:
        q = select(schedules).where(schedules.c.id == schedule_id)
        if tenant is not None:
            q = q.where(schedules.c.tenant == tenant)
        rows = self._db.rows(q)
        return _schedule(rows[0]) if rows else None

    def of(self, tenant: str) -> list[Schedule]:
        q = select(schedules).where(schedules.c.tenant == tenant).order_by(schedules.c.created, schedules.c.id)
        return [_schedule(r) for r in self._db.rows(q)]

    def by_trigger(self, sha256: str) -> Schedule | None:
        """The schedule whose trigger token hashes to ``sha256`` (a revoked token's hash is no longer kept)."""
        rows = self._db.rows(select(schedules).where(schedules.c.trigger_sha256 == sha256))
        return _schedule(rows[0]) if rows else None

    def set_trigger(self, schedule_id: str, sha256: str | None) -> bool:
        """A new trigger token's hash (the old one stops at once), or None: revoked."""
        return self._db.write(update(schedules).where(schedules.c.id == schedule_id)
                              .values(trigger_sha256=sha256)) == 1

    def pause(self, schedule_id: str, paused: bool, *, next_at: float | None) -> Schedule | None:
        """Paused: its ticks are not fired. Resumed: ``next_at`` is its first tick from now (none missed is run)."""
        q = (update(schedules).where(schedules.c.id == schedule_id)
             .values(paused=int(paused), next_at=next_at, holder=None, expires=None).returning(*schedules.c))
        with self._db.statement() as t:
            row = t.execute(q).mappings().first()
        return _schedule(row) if row is not None else None

    def delete(self, schedule_id: str) -> bool:
        """The schedule goes (a tick held now writes nothing more); its history stays with its runs."""
        with self._db.statement() as t:
            return int(t.execute(delete(schedules).where(schedules.c.id == schedule_id)).rowcount) == 1

    def count(self, tenant: str) -> int:
        return int(self._db.scalar(select(func.count()).select_from(schedules).where(schedules.c.tenant == tenant)))

    # -- the ticks ------------------------------------------------------------------------------
    def due(self, *, now: float) -> list[Schedule]:
        """Schedules whose next tick is due and that no replica holds (or whose holder's hold ran out)."""
        q = (select(schedules).where(schedules.c.paused == 0, schedules.c.next_at <= now,
                                     or_(schedules.c.expires.is_(None), schedules.c.expires < now))
             .order_by(schedules.c.next_at))
        return [_schedule(r) for r in self._db.rows(q)]

    def hold(self, schedule_id: str, tick: float, owner: str, *, now: float, ttl: float) -> Schedule | None:
        """Hold the tick ``tick`` of a schedule for ``owner`` until ``now + ttl``: only while it is still its due
        tick and no one else holds it (or their hold ran out). The generation goes up: a former holder writes
        nothing more. None when another replica holds it, fired it already, or it was paused or deleted."""
        q = (update(schedules)
             .where(schedules.c.id == schedule_id, schedules.c.next_at == tick, schedules.c.paused == 0,
                    or_(schedules.c.expires.is_(None), schedules.c.expires < now, schedules.c.holder == owner))
             .values(holder=owner, generation=schedules.c.generation + 1, expires=now + ttl)
             .returning(*schedules.c))
        with self._db.statement() as t:
            row = t.execute(q).mappings().first()
        return _schedule(row) if row is not None else None

    def advance(self, held: Schedule, next_at: float | None, *, last_run: str | None) -> bool:
        """The held tick is done: the schedule's next tick is ``next_at``, its hold let go — only under the
        generation held (False: another replica took the tick since, and this one's writes are void)."""
        values: dict[str, Any] = {"next_at": next_at, "holder": None, "expires": None}
        if last_run is not None:
            values["last_run"] = last_run
        return self._db.write(update(schedules).where(schedules.c.id == held.id,
                                                      schedules.c.generation == held.generation)
                              .values(**values)) == 1

    def let_go(self, held: Schedule) -> bool:
        """The held tick stays due (its run waits for the last one to end): only the hold goes."""
        return self._db.write(update(schedules).where(schedules.c.id == held.id,
                                                      schedules.c.generation == held.generation)
                              .values(holder=None, expires=None)) == 1

    def still_held(self, held: Schedule) -> bool:
        """The hold is still this one (the fence, read before a run is submitted)."""
        return bool(self._db.rows(select(schedules.c.id).where(schedules.c.id == held.id,
                                                               schedules.c.generation == held.generation)))

    # -- the history -------------------------------------------------------------------------------
    def record(self, fire: Fire) -> Fire:
        """What a tick or trigger did, once per (schedule, tick): a second record of the same tick (its replica
        died after writing it) keeps the first, which is returned."""
        q = dialects.insert(fires, self._db.dialect).values(**msgspec.structs.asdict(fire))
        with self._db.statement() as t:
            t.execute(q.on_conflict_do_nothing(index_elements=[fires.c.schedule, fires.c.tick]))
            row = t.execute(select(fires).where(fires.c.schedule == fire.schedule,
                                                fires.c.tick == fire.tick)).mappings().one()
        return _fire(row)

    def started(self, schedule_id: str, tick: float) -> None:
        """The fire's run is queued."""
        self._db.write(update(fires).where(fires.c.schedule == schedule_id, fires.c.tick == tick,
                                           fires.c.outcome == "firing").values(outcome="started"))

    def refused(self, schedule_id: str, tick: float, why: str) -> None:
        """The run a fire recorded could not be queued (the service refused it): ``why``, and no run."""
        self._db.write(update(fires).where(fires.c.schedule == schedule_id, fires.c.tick == tick)
                       .values(outcome="refused", why=why, run=None))

    def history(self, schedule_id: str, *, limit: int = 20) -> list[Fire]:
        """Its last ``limit`` ticks and triggers, newest first."""
        q = select(fires).where(fires.c.schedule == schedule_id).order_by(fires.c.tick.desc()).limit(limit)
        return [_fire(r) for r in self._db.rows(q)]

    def fired(self, run_id: str) -> Fire | None:
        """What fired ``run_id`` (None: a run submitted by hand)."""
        rows = self._db.rows(select(fires).where(fires.c.run == run_id))
        return _fire(rows[0]) if rows else None

    def take_trigger(self, schedule: Schedule, *, now: float, window_s: float, cap: int,
                     run_id: Callable[[float], str]) -> Fire | None:
        """A trigger's fire of ``schedule`` recorded (its run ``run_id(tick)``), unless its trigger started ``cap``
        runs in the last ``window_s`` (None then). Counted and written in one transaction under a lock per
        schedule (PostgreSQL: an advisory lock; SQLite: its one writer), so fires taken at once never pass the cap
        together. Its tick is now, or just after the schedule's last fire (each fire has a tick of its own)."""
        with self._db.transaction() as t:
            if self._db.dialect == "postgresql":
                t.execute(select(func.pg_advisory_xact_lock(func.hashtext(f"flower-trigger:{schedule.id}"))))
            started = t.execute(select(func.count()).select_from(fires).where(
                fires.c.schedule == schedule.id, fires.c.fired_by == "trigger",
                fires.c.outcome.in_(("firing", "started")),
                fires.c.at > now - window_s)).scalar_one()
            if int(started) >= cap:
                return None
            last = t.execute(select(func.max(fires.c.tick)).where(fires.c.schedule == schedule.id)).scalar()
            tick = now if last is None or float(last) < now else float(last) + 0.001
            fire = Fire(schedule=schedule.id, tick=tick, tenant=schedule.tenant, run=run_id(tick),
                        fired_by="trigger", outcome="firing", why=None, budget_usd=schedule.budget_usd, at=now)
            t.execute(fires.insert().values(**msgspec.structs.asdict(fire)))
        return fire

    def fired_of(self, run_ids: list[str]) -> dict[str, Fire]:
        """What fired each of ``run_ids`` that a schedule or trigger started (the others are not keys)."""
        if not run_ids:
            return {}
        return {str(r["run"]): _fire(r) for r in self._db.rows(select(fires).where(fires.c.run.in_(run_ids)))}

    def live_run(self, schedule: Schedule) -> str | None:
        """The schedule's last run when it has not ended (queued, starting, running or parked), else None."""
        if schedule.last_run is None:
            return None
        rows = self._db.rows(select(runs.c.status).where(runs.c.id == schedule.last_run))
        return schedule.last_run if rows and rows[0]["status"] not in TERMINAL else None

    def set_last_run(self, schedule_id: str, run_id: str) -> None:
        """A triggered run is the schedule's last run (the overlap rule looks at it)."""
        self._db.write(update(schedules).where(schedules.c.id == schedule_id).values(last_run=run_id))

