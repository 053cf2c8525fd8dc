"""Triggers: a schedule (or a saved ask with no cron) fired by ``POST /v1/triggers/{schedule}`` with its own token —
never its tenant's — and an optional text appended to its ask (a CI failure's log tail).

The token is shown once, when it is issued; the registry keeps its hash. Issuing a new one or revoking it stops the
old one at once (401). A trigger starts at most ``trigger_per_minute`` runs in any minute, counted and recorded in
one transaction (``SchedulesTable.take_trigger``), so replicas taking fires at once never pass it together; the
rest are refused (429) and start nothing. A trigger's run is the schedule's last run for its overlap rule, but the
rule does not hold a trigger back: its rate does.

    ServiceError
    ├── TriggerUnknown  no schedule has this token (never issued, or revoked) (401)
    ├── TriggerPaused   the schedule is paused: its trigger starts nothing until it is resumed (409)
    └── TriggerPaced    the trigger started its minute's worth of runs already (429, ``retry_after_s``)
"""

from __future__ import annotations

import asyncio
import hashlib
import secrets

import msgspec

from ..clock import SYSTEM, Clock
from ..config import ServiceConfig
from ..errors import ServiceError, TenantNotReady
from ..logging import get_logger
from ..registry import SchedulesTable
from ..registry.schedules import Fire, Schedule
from ..tenants import Tenants
from .admission import Admission, BadSubmit, DiskLow, NotTakingRuns, QueueFull
from .schedules import tick_run_id

__all__ = ["Triggers", "TriggerUnknown", "TriggerPaused", "TriggerPaced", "WINDOW_S", "TOKEN_PREFIX"]

log = get_logger("flower.service.schedules")

WINDOW_S = 60.0
TOKEN_PREFIX = "flt-"


class TriggerUnknown(ServiceError):
    """No schedule has this trigger token: never issued, or revoked."""


class TriggerPaused(ServiceError):
    """The trigger's schedule is paused: nothing was started."""


class TriggerPaced(ServiceError):
    """The trigger started its minute's worth of runs: nothing was started; fire again after ``retry_after_s``."""

    def __init__(self, message: str, *, retry_after_s: int) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


class Triggers:
    def __init__(self, config: ServiceConfig, table: SchedulesTable, admission: Admission, tenants: Tenants, *,
                 clock: Clock = SYSTEM) -> None:
        self.config, self.table, self.admission, self.tenants, self.clock = config, table, admission, tenants, clock

    def issue(self, schedule: Schedule) -> str:
        """A new trigger token for ``schedule`` (the only time it is shown); a former one stops at once."""
        token = TOKEN_PREFIX + secrets.token_urlsafe(32)
        self.table.set_trigger(schedule.id, token_hash(token))
        log.info("trigger.issued", tenant=schedule.tenant, schedule=schedule.id)
        return token

    def revoke(self, schedule: Schedule) -> None:
        self.table.set_trigger(schedule.id, None)
        log.info("trigger.revoked", tenant=schedule.tenant, schedule=schedule.id)

    async def fire(self, schedule_id: str, token: str, text: str | None) -> Fire:
        """Start the schedule's ask (``text`` appended) as a run, or raise why not; the fire as recorded (its
        ``outcome`` "refused" when the service would not queue the run: ``why`` says so)."""
        schedule = await asyncio.to_thread(self.table.by_trigger, token_hash(token))
        if schedule is None or schedule.id != schedule_id:
            raise TriggerUnknown(f"this token fires no trigger of schedule {schedule_id[:100]!r}: it was never issued "
                                 "for it or was revoked; ask its tenant for the current one")
        if schedule.paused:
            raise TriggerPaused(f"schedule {schedule.id} is paused: its trigger starts nothing until it is resumed "
                                f"(POST /v1/schedules/{schedule.id}/resume)")
        cap = self.config.trigger_per_minute
        fire = await asyncio.to_thread(self.table.take_trigger, schedule, now=self.clock.now(), window_s=WINDOW_S,
                                       cap=cap, run_id=lambda tick: tick_run_id(schedule.id, tick))
        if fire is None:
            raise TriggerPaced(f"the trigger of schedule {schedule.id} started its {cap} runs of the last minute "
                               "(trigger_per_minute): nothing was started; fire again in a minute",
                               retry_after_s=int(WINDOW_S))
        assert fire.run is not None
        ask = schedule.ask if not text else f"{schedule.ask}\n\n{text}"
        tenant = self.tenants.get(schedule.tenant)
        try:
            if tenant is None:
                raise TenantNotReady(f"tenant {schedule.tenant} is no longer in the tenants file")
            await self.admission.submit(tenant, ask, dict(schedule.options), run_id=fire.run)
        except (NotTakingRuns, BadSubmit, QueueFull, DiskLow, TenantNotReady) as e:
            why = f"no run was queued: {e}"
            await asyncio.to_thread(self.table.refused, schedule.id, fire.tick, why)
            log.warning("trigger.refused", tenant=schedule.tenant, schedule=schedule.id, error=why)
            return msgspec.structs.replace(fire, run=None, outcome="refused", why=why)
        await asyncio.to_thread(self.table.started, schedule.id, fire.tick)
        await asyncio.to_thread(self.table.set_last_run, schedule.id, fire.run)
        log.info("trigger.fired", tenant=schedule.tenant, schedule=schedule.id, run=fire.run)
        return msgspec.structs.replace(fire, outcome="started")
