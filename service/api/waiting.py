"""Why a queued run waits, in one sentence for its tenant (``waiting`` in ``GET /v1/runs/{id}``) — and a starting
one, while its team's environment is prepared (a first setup takes minutes).

The scheduler starts a queued run when the service takes runs, its engine answers, the disk has room, the
tenant's quota and the service's slots have room, and the tenant's older queued runs went first
(``service.control.starting``); this says the first of those that holds it back, from the same facts, read when
asked. A run over its tenant's budget does not wait: it fails with the reason.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..config import ServiceConfig
from ..control.gate import Gate
from ..control.health import Health
from ..registry import ACTIVE, Run, RunsTable
from ..tenants import Tenant

__all__ = ["Queue", "why_waiting", "waiting_of"]


@dataclass(frozen=True)
class Queue:
    """What a queued run's start depends on, as it is now."""
    refused: str | None
    held: str | None
    resumes_in_s: float | None
    """A run that lost its sandbox waits this long more before it starts again (its resume's backoff)."""
    disk_low: str | None
    engine_down: str | None
    tenant_busy: int
    quota: int
    busy: int
    max_running: int
    ahead: int


def _runs(n: int) -> str:
    return f"{n} run" + ("" if n == 1 else "s")


def why_waiting(q: Queue) -> str:
    """The first thing that holds the run back (pure)."""
    if q.refused:
        return f"the service takes no runs: {q.refused}"
    if q.held:
        return f"the service holds queued runs for now: {q.held}"
    if q.resumes_in_s is not None and q.resumes_in_s > 0:
        return f"it lost its sandbox and starts again in a new one in {q.resumes_in_s:.0f}s"
    if q.disk_low:
        return f"the service is low on disk space ({q.disk_low}): it starts once the operator frees space"
    if q.engine_down:
        return f"the service's sandbox engine does not answer ({q.engine_down}): it starts when the engine is back"
    if q.tenant_busy >= q.quota:
        return (f"your tenant's quota of {_runs(q.quota)} at once is in use: it starts when one of them ends")
    if q.busy >= q.max_running:
        return (f"the service's {q.max_running} slots are all in use (other tenants' runs too): it starts when one "
                "frees up")
    if q.ahead:
        return f"{_runs(q.ahead)} of yours queued before it start first"
    return "it starts at the scheduler's next pass"


def waiting_of(run: Run, tenant: Tenant, runs: RunsTable, config: ServiceConfig, gate: Gate,
               health: Health, now: float, preparing: str | None = None) -> str | None:
    """The sentence for a queued run, or for a starting one whose team's environment is being prepared
    (``preparing``: what the preparation said last); None for any other."""
    if run.status == "starting" and preparing:
        return ("its team's environment is being prepared (the first time, or its image, setup or lockfiles "
                f"changed; later runs start from it): {preparing}")
    if run.status != "queued":
        return None
    disk = health.disk()
    queued = [r.id for r in runs.list(tenant=tenant.name, statuses=["queued"], oldest_first=True, limit=1000)]
    return why_waiting(Queue(
        refused=gate.refused, held=gate.held, resumes_in_s=run.not_before - now if run.not_before else None,
        disk_low=disk.sentence() if disk.low else None,
        engine_down=None if health.backend_up else f"{health.backend}: {health.backend_error}",
        tenant_busy=runs.count(statuses=ACTIVE, tenant=tenant.name), quota=tenant.quota,
        busy=runs.count(statuses=ACTIVE), max_running=config.max_running,
        ahead=queued.index(run.id) if run.id in queued else 0))
