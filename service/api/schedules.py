"""/v1/schedules: a tenant's scheduled asks — create, list with their history, pause, resume, delete, and their
trigger's token (issue, revoke); /v1/triggers/{schedule}: fire one with its trigger's own token (not a tenant's).
The rules are ``service.control.schedules`` and ``service.control.triggers``; the handlers turn their errors into
statuses."""

from __future__ import annotations

import re
import time
from typing import Annotated, Any, Literal

import msgspec
from litestar import Controller, Request, Response, delete, get, post
from litestar.exceptions import NotAuthorizedException, NotFoundException, ValidationException
from litestar.params import Body, FromPath

from ..control.schedules import BadSchedule, Schedules
from ..control.triggers import TriggerPaced, TriggerPaused, TriggerUnknown
from ..logging import get_logger
from ..registry.schedules import Fire, Overlap, Schedule
from .deps import SchedulesDep, TenantDep, TriggersDep
from .errors import Conflict, TooManyRequests, Unprocessable, errors
from .examples import example, ok
from .schemas import MAX_ASK, MAX_TEXT, JSON

__all__ = ["ScheduleController", "TriggerController", "fire_out", "FireOut"]

log = get_logger("flower.service.api")


# -- what goes over the wire ------------------------------------------------------------------
class ScheduleIn(msgspec.Struct, forbid_unknown_fields=True):
    """A scheduled ask: ``cron`` (five fields, read in ``timezone``; null: fired by its trigger only), a budget per
    run (USD, within the tenant's), and what a tick does while the last run is live: ``skip`` it, ``queue`` it (it
    starts once that run ended) or ``cancel`` that run and start. ``trigger``: also issue a trigger token."""
    ask: Annotated[str, msgspec.Meta(min_length=1, max_length=MAX_ASK)]
    options: dict[str, JSON] = {}
    cron: Annotated[str, msgspec.Meta(max_length=200)] | None = None
    timezone: Annotated[str, msgspec.Meta(max_length=100)] = "UTC"
    budget_usd: Annotated[float, msgspec.Meta(gt=0, le=1_000_000)] | None = None
    overlap: Overlap = "skip"
    trigger: bool = False


class FireIn(msgspec.Struct, forbid_unknown_fields=True):
    """What a trigger's run is told beyond its schedule's ask (appended to it): a CI failure's log tail."""
    text: Annotated[str, msgspec.Meta(max_length=MAX_TEXT)] | None = None


class FireOut(msgspec.Struct):
    """One tick or trigger of a schedule: ``outcome`` "started" (``run``), "skipped" or "refused" (``why``) —
    "firing" for the moment between its record and its run being queued."""
    schedule: str
    tick: str
    fired_by: Literal["schedule", "trigger"]
    outcome: Literal["firing", "started", "skipped", "refused"]
    run: str | None
    why: str | None
    budget_usd: float | None
    at: str


class ScheduleOut(msgspec.Struct):
    """A schedule, its next tick (ISO 8601 UTC; null while paused or without a cron) and its last fires, newest
    first. ``trigger_token`` only in the answer that issued it (it is never shown again)."""
    id: str
    ask: str
    options: dict[str, JSON]
    cron: str | None
    timezone: str
    budget_usd: float | None
    overlap: Overlap
    paused: bool
    created: str
    next_at: str | None
    trigger: bool
    last_run: str | None
    history: list[FireOut]
    trigger_token: str | None = None


class ScheduleList(msgspec.Struct):
    schedules: list[ScheduleOut]


class TriggerOut(msgspec.Struct):
    """A trigger's token (shown this once) and where to POST it."""
    schedule: str
    token: str
    url: str


def _iso(t: float | None) -> str | None:
    if t is None:
        return None
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t)) + f".{int(t % 1 * 1000):03d}Z"


def fire_out(f: Fire) -> FireOut:
    return FireOut(schedule=f.schedule, tick=_iso(f.tick) or "", fired_by=f.fired_by, outcome=f.outcome, run=f.run,
                   why=f.why, budget_usd=f.budget_usd, at=_iso(f.at) or "")


def schedule_out(s: Schedule, history: list[Fire], token: str | None = None) -> ScheduleOut:
    return ScheduleOut(id=s.id, ask=s.ask, options=s.options, cron=s.cron, timezone=s.timezone,
                       budget_usd=s.budget_usd, overlap=s.overlap, paused=s.paused, created=_iso(s.created) or "",
                       next_at=None if s.paused else _iso(s.next_at), trigger=s.trigger_sha256 is not None,
                       last_run=s.last_run, history=[fire_out(f) for f in history], trigger_token=token)


SCHEDULE_ID = "sch-3f9c2a7e5b1d4c6a8e0f1b2c"
CREATE = ScheduleIn(ask="Look at the flaky tests of last night's CI and fix one", cron="0 3 * * 1-5",
                    timezone="Europe/Paris", budget_usd=2.0, overlap="skip", trigger=True)
FIRE = FireIn(text="FAILED tests/test_api.py::test_retry - AssertionError: 3 != 2")
FIRED = FireOut(schedule=SCHEDULE_ID, tick="2025-06-12T01:00:00.000Z", fired_by="schedule", outcome="started",
                run="20250612-010000-5d2c9e0a1b3f4e6d8a7c6b5e4d3c2b1a", why=None, budget_usd=2.0,
                at="2025-06-12T01:00:00.412Z")
SCHEDULE = ScheduleOut(id=SCHEDULE_ID, ask=CREATE.ask, options={}, cron=CREATE.cron, timezone="Europe/Paris",
                       budget_usd=2.0, overlap="skip", paused=False, created="2025-06-10T08:12:00.000Z",
                       next_at="2025-06-13T01:00:00.000Z", trigger=True, last_run=FIRED.run, history=[FIRED])
TRIGGER = TriggerOut(schedule=SCHEDULE_ID, token="flt-2q7VfH0c1xk9QeN4bL8sYt3mWz6pRj5uAa1dGo0iKeE",
                     url=f"/v1/triggers/{SCHEDULE_ID}")
CreateBody = Annotated[ScheduleIn, Body(examples=[example(CREATE, "every weekday at 03:00 Paris time, $2 a run")])]
FireBody = Annotated[FireIn | None, Body(examples=[example(FIRE, "a CI failure's last lines")])]


SCHEDULE_ID_RE = re.compile(r"sch-[0-9a-f]{24}")  # (asked of no database otherwise: PostgreSQL refuses a NUL byte)


def _schedule(schedules: Schedules, tenant: TenantDep, schedule_id: str) -> Schedule:
    found = schedules.table.get(schedule_id, tenant=tenant.name) if SCHEDULE_ID_RE.fullmatch(schedule_id) else None
    if found is None:
        raise NotFoundException(f"schedule {schedule_id[:100]} not found: GET /v1/schedules lists yours")
    return found


class ScheduleController(Controller):
    path = "/schedules"
    tags = ["schedules"]

    @post("/", status_code=201, operation_id="create_schedule", summary="Schedule an ask (cron, timezone, budget)",
          responses={**ok(201, msgspec.structs.replace(SCHEDULE, history=[], trigger_token=TRIGGER.token),
                          "the schedule; its trigger's token this once"), **errors(404)})
    async def create(self, tenant: TenantDep, schedules: SchedulesDep, triggers: TriggersDep,
                     data: CreateBody) -> Response[ScheduleOut]:
        """Each tick of `cron` in `timezone` queues the ask as a run of the caller's tenant, with `budget_usd` as
        its per-run budget; a cron firing more often than the tenant's minimum interval, or a timezone that does
        not exist, is a 400 and nothing is scheduled."""
        try:
            made = schedules.create(tenant, ask=data.ask, options=data.options, cron=data.cron,
                                    timezone=data.timezone, budget_usd=data.budget_usd, overlap=data.overlap)
        except BadSchedule as e:
            raise ValidationException(str(e)) from None
        token = triggers.issue(made) if data.trigger else None
        made = schedules.table.get(made.id) or made
        return Response(schedule_out(made, [], token), status_code=201,
                        headers={"Location": f"/v1/schedules/{made.id}"})

    @get("/", operation_id="list_schedules", summary="The tenant's schedules with their recent history",
         responses={**ok(200, ScheduleList(schedules=[SCHEDULE]), "oldest first"), **errors()})
    async def list_schedules(self, tenant: TenantDep, schedules: SchedulesDep) -> ScheduleList:
        """Every schedule of the caller's tenant, each with its last 20 ticks and triggers (what they started,
        skipped or were refused)."""
        table = schedules.table
        return ScheduleList(schedules=[schedule_out(s, table.history(s.id)) for s in table.of(tenant.name)])

    @get("/{schedule_id:str}", operation_id="get_schedule", summary="One schedule and its history",
         responses={**ok(200, SCHEDULE, "the schedule as it is now"), **errors(404)})
    async def get_schedule(self, tenant: TenantDep, schedules: SchedulesDep, schedule_id: FromPath[str],
                           limit: int = 20) -> ScheduleOut:
        """Its next tick and its last `limit` fires, newest first."""
        found = _schedule(schedules, tenant, schedule_id)
        return schedule_out(found, schedules.table.history(found.id, limit=max(1, min(limit, 1000))))

    @post("/{schedule_id:str}/pause", status_code=200, operation_id="pause_schedule", summary="Stop its ticks",
          responses={**ok(200, msgspec.structs.replace(SCHEDULE, paused=True, next_at=None), "paused"),
                     **errors(404)})
    async def pause(self, tenant: TenantDep, schedules: SchedulesDep, schedule_id: FromPath[str]) -> ScheduleOut:
        """No tick fires while it is paused (its trigger starts nothing either); a run it started goes on."""
        found = schedules.pause(_schedule(schedules, tenant, schedule_id), True)
        return schedule_out(found, schedules.table.history(found.id))

    @post("/{schedule_id:str}/resume", status_code=200, operation_id="resume_schedule",
          summary="Tick again, from the next tick after now", responses={**ok(200, SCHEDULE, "resumed"), **errors(404)})
    async def resume(self, tenant: TenantDep, schedules: SchedulesDep, schedule_id: FromPath[str]) -> ScheduleOut:
        """The ticks missed while it was paused are not run."""
        found = schedules.pause(_schedule(schedules, tenant, schedule_id), False)
        return schedule_out(found, schedules.table.history(found.id))

    @delete("/{schedule_id:str}", status_code=200, operation_id="delete_schedule", summary="Delete a schedule",
            responses={**ok(200, SCHEDULE, "the schedule as it was"), **errors(404)})
    async def delete_schedule(self, tenant: TenantDep, schedules: SchedulesDep,
                              schedule_id: FromPath[str]) -> ScheduleOut:
        """No tick fires after this and its trigger's token stops; the runs it started stay, and so does their
        history."""
        found = _schedule(schedules, tenant, schedule_id)
        schedules.table.delete(found.id)
        log.info("schedule.deleted", tenant=tenant.name, schedule=found.id)
        return schedule_out(found, schedules.table.history(found.id))

    @post("/{schedule_id:str}/trigger", status_code=201, operation_id="issue_trigger",
          summary="A new trigger token (the old one stops)", responses={**ok(201, TRIGGER, "shown once"),
                                                                        **errors(404)})
    async def issue(self, tenant: TenantDep, schedules: SchedulesDep, triggers: TriggersDep,
                    schedule_id: FromPath[str]) -> TriggerOut:
        """POST it to `url` with `Authorization: Bearer <token>` to start the schedule's ask now; keep it where
        your CI keeps secrets. It is not your tenant's token and starts nothing else."""
        found = _schedule(schedules, tenant, schedule_id)
        return TriggerOut(schedule=found.id, token=triggers.issue(found), url=f"/v1/triggers/{found.id}")

    @delete("/{schedule_id:str}/trigger", status_code=200, operation_id="revoke_trigger",
            summary="Revoke the trigger token", responses={**ok(200, SCHEDULE, "no trigger"), **errors(404)})
    async def revoke(self, tenant: TenantDep, schedules: SchedulesDep, triggers: TriggersDep,
                     schedule_id: FromPath[str]) -> ScheduleOut:
        """A fire with the revoked token is a 401 from now on, on every replica."""
        found = _schedule(schedules, tenant, schedule_id)
        triggers.revoke(found)
        return schedule_out(schedules.table.get(found.id) or found, schedules.table.history(found.id))


_CHALLENGE = {"WWW-Authenticate": 'Bearer realm="flower-trigger"'}


class TriggerController(Controller):
    """Outside the tenant's bearer guard: the trigger's own token is the credential."""
    path = "/triggers"
    tags = ["schedules"]

    @post("/{schedule_id:str}", status_code=201, operation_id="fire_trigger",
          summary="Fire a schedule with its trigger token: its ask (and `text`) becomes a run now",
          responses={**ok(201, msgspec.structs.replace(FIRED, fired_by="trigger"), "the run it started"),
                     **errors(401, 409, 422, 429)})
    async def fire(self, request: Request[Any, Any, Any], triggers: TriggersDep,
                   schedule_id: FromPath[str], data: FireBody = None) -> Response[FireOut]:
        """`Authorization: Bearer <the trigger's token>`. Starts at most the service's `trigger_per_minute` runs a
        minute (429 past it, nothing started); a revoked token is a 401. The run's webhook events say the trigger
        fired it."""
        scheme, _sep, token = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise NotAuthorizedException("missing trigger token: send `Authorization: Bearer <the trigger's token>`",
                                         headers=_CHALLENGE)
        try:
            fire = await triggers.fire(schedule_id, token.strip(), data.text if data is not None else None)
        except TriggerUnknown as e:
            raise NotAuthorizedException(str(e), headers=_CHALLENGE) from None
        except TriggerPaused as e:
            raise Conflict(str(e)) from None
        except TriggerPaced as e:
            raise TooManyRequests(str(e), headers={"Retry-After": str(e.retry_after_s)}) from None
        if fire.run is None:
            raise Unprocessable(f"the trigger fired but {fire.why}")
        return Response(fire_out(fire), status_code=201)
