"""What handlers are given rather than fetch: the caller's tenant (from its bearer token), the registry's tables
they read (runs, spend, deliveries — never the registry whole), the parts of the service they use
(``service.wiring`` built them: the gate, health, the mailbox, run control, the stream slots, results, the clock —
never the scheduler), the submit rules (``service.control.admission``), the config, and the run a path names —
already checked to be the caller's own."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from litestar import Request
from litestar.connection import ASGIConnection
from litestar.di import NamedDependency, Provide
from litestar.params import FromPath
from litestar.exceptions import NotAuthorizedException, NotFoundException
from litestar.handlers import BaseRouteHandler

from ..clock import Clock
from ..config import ServiceConfig
from ..control.admission import Admission
from ..control.environments import Environments
from ..control.gate import Gate
from ..control.health import Health
from ..control.mailbox import Mailbox
from ..control.schedules import Schedules
from ..control.streams import StreamSlots
from ..control.triggers import Triggers
from ..metrics import Metrics
from ..registry import DeliveriesTable, Run, RunsTable, SpendTable
from ..registry.short_ids import HEX_AT, LAST, MIN_SHORT, SHORT_LEN, short_of
from ..tenants import Tenant, Tenants
from ..wiring import RunControl, Service
from .errors import Conflict, TooManyRequests
from .limits import RateLimits
from .scrape import ScrapeToken

__all__ = ["bearer_guard", "dependencies", "provide_run", "AdmissionDep", "ClockDep", "ConfigDep", "ControlDep",
           "GateDep", "HealthDep", "MailboxDep", "RunsDep", "SpendDep", "DeliveriesDep", "SlotsDep", "MetricsDep",
           "ScrapeDep", "TenantDep", "RunDep", "SchedulesDep", "TriggersDep", "EnvironmentsDep", "MIN_PREFIX",
           "RUN_ID_CHARS"]

# what a handler declares to be given (by name: ``runs: RunsDep``) — the tables it reads, never the registry whole
AdmissionDep = NamedDependency[Admission]
ConfigDep = NamedDependency[ServiceConfig]
RunsDep = NamedDependency[RunsTable]
SpendDep = NamedDependency[SpendTable]
DeliveriesDep = NamedDependency[DeliveriesTable]
ClockDep = NamedDependency[Clock]
ControlDep = NamedDependency[RunControl]
GateDep = NamedDependency[Gate]
HealthDep = NamedDependency[Health]
MailboxDep = NamedDependency[Mailbox]
SlotsDep = NamedDependency[StreamSlots]
MetricsDep = NamedDependency[Metrics]
ScrapeDep = NamedDependency[ScrapeToken]
TenantDep = NamedDependency[Tenant]
RunDep = NamedDependency[Run]
SchedulesDep = NamedDependency[Schedules]
TriggersDep = NamedDependency[Triggers]
EnvironmentsDep = NamedDependency[Environments]

MIN_PREFIX = 8
"""The fewest characters of a run id that are looked up as its start (the date alone is eight)."""
AMBIGUOUS_SHOWN = 5
RUN_ID_CHARS = frozenset("0123456789abcdef-")

_CHALLENGE = {"WWW-Authenticate": 'Bearer realm="flower"'}


def bearer_guard(tenants: Tenants, limits: RateLimits | None = None
                 ) -> Callable[[ASGIConnection[Any, Any, Any, Any], BaseRouteHandler], Awaitable[None]]:
    """``Authorization: Bearer <tenant token>`` or 401; the tenant it names goes on the connection's state. With
    ``limits``, a tenant past its pace is a 429 with ``Retry-After`` here, before anything else is read."""

    async def guard(connection: ASGIConnection[Any, Any, Any, Any], _: BaseRouteHandler) -> None:
        scheme, _sep, token = connection.headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise NotAuthorizedException("missing bearer token: send `Authorization: Bearer <your tenant token>`",
                                         headers=_CHALLENGE)
        tenant = tenants.authenticate(token.strip())
        if tenant is None:
            raise NotAuthorizedException("this token belongs to no tenant: check it, or ask the operator for yours",
                                         headers=_CHALLENGE)
        paced = await limits.pace(tenant) if limits is not None else None
        if paced is not None:
            raise TooManyRequests(paced.sentence(tenant.name), headers={"Retry-After": str(paced.retry_after_s)})
        connection.state.tenant = tenant

    return guard


def _tenant(request: Request[Any, Any, Any]) -> Tenant:
    tenant: Tenant = request.state.tenant  # set by the guard, which runs first
    return tenant


def provide_run(runs: RunsDep, tenant: TenantDep, run_id: FromPath[str]) -> Run:
    """The run ``run_id`` names among the caller's tenant's: its whole id, ``last`` (the newest), its short id or
    any prefix of its hex part (``MIN_SHORT`` digits or more), or a prefix of its whole id (``MIN_PREFIX``
    characters or more); 404 when none, 409 naming the candidates when several. An id of other characters than
    a run id's is no run (asked of no database: PostgreSQL refuses a NUL byte)."""
    if run_id == LAST:
        newest = runs.list(tenant=tenant.name, limit=1, deleted=False)
        if not newest:
            raise NotFoundException("you have no run yet, so `last` names none: submit one first")
        return newest[0]
    if not RUN_ID_CHARS.issuperset(run_id):
        raise NotFoundException(f"run {run_id[:100]!r} not found: a run id holds only digits, a-f and '-' "
                                "(or say `last`)")
    run = runs.get(run_id, tenant=tenant.name)
    if run is not None:
        return run
    if len(run_id) < MIN_SHORT:
        raise NotFoundException(f"run {run_id} not found: give at least {MIN_SHORT} characters of its short id "
                                "(`flower remote list` shows them), or `last`")
    found = runs.ids_starting(run_id, tenant=tenant.name, limit=AMBIGUOUS_SHOWN + 1,
                              hex_part="-" not in run_id)
    if len(run_id) < MIN_PREFIX:  # so short it only names a hex part: not the first digits of a date
        found = [f for f in found if short_of(f).startswith(run_id)]
    if len(found) > 1:
        more = ", …" if len(found) > AMBIGUOUS_SHOWN else ""
        listed = ", ".join(f"{short_of(f)} ({f})" for f in found[:AMBIGUOUS_SHOWN])
        raise Conflict(f"run id {run_id} is ambiguous: more than one of your runs goes by it ({listed}{more}); "
                       "give more of it, or the short id")
    run = runs.get(found[0], tenant=tenant.name) if found else None
    if run is None:
        raise NotFoundException(f"run {run_id} not found" if len(run_id) >= HEX_AT + SHORT_LEN else
                                f"run {run_id} not found among your runs: `flower remote list` shows their short ids")
    return run


def dependencies(service: Service) -> dict[str, Provide]:
    """Each handler's parameter by name, from the parts ``service.wiring.build`` made."""
    def value(v: Any) -> Provide:
        return Provide(lambda: v, use_cache=True, sync_to_thread=False)

    gate, admission = service.gate, service.admission
    return {"config": value(service.config), "runs": value(service.registry.runs),
            "spend": value(service.registry.spend),
            "deliveries": value(service.registry.deliveries), "admission": value(admission),
            "metrics": value(service.metrics), "clock": value(service.clock), "gate": value(gate),
            "health": value(service.health), "mailbox": value(service.mailbox), "control": value(service.runs),
            "slots": value(service.slots), "results": value(service.results),
            "schedules": value(service.schedules), "triggers": value(service.triggers),
            "environments": value(service.environments),
            "tenant": Provide(_tenant, sync_to_thread=False)}
