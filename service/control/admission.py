"""The submit rules: whether an ask becomes a queued run, and if not, why — the service behind ``POST /v1/runs``.

The HTTP handler stays thin (litestar-fullstack's controller → service shape): it hands the tenant and the
body here and turns the errors below into statuses. In order: the service takes runs at all (the guard canary
did not fail); the ask is not blank; the options are ones the tenant may set and a run spec accepts; the
tenant has fewer runs queued than its cap (``max_queued``, else the config's ``max_queued_per_tenant``: counted
again with the row, under a lock, so replicas never pass it together); the tenant's repository and credentials
can serve a run now; the disk has room (a fresh look); then the row. Nothing is queued when any of them says no.

    ServiceError
    ├── NotTakingRuns   the service refuses every run (503): the canary's sentence
    ├── BadSubmit       the ask or its options cannot be run (400) (ValueError)
    ├── QueueFull       the tenant has its cap of runs queued (429, retry later)
    ├── TenantNotReady  the tenant cannot run here now (422) — ``service.errors``
    └── DiskLow         the disk is full or below its floor: nothing was queued (507, retry later)
"""

from __future__ import annotations

import asyncio
import re
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import msgspec

from sandbox.layout import RunLayout
from sandbox.spec import RunSpec

from ..config import ServiceConfig
from ..errors import ServiceError, TenantNotReady
from ..logging import get_logger
from ..registry import Run, RunsTable
from ..registry.short_ids import short_of
from ..tenants import Tenant
from .health import Health, is_disk_full

__all__ = ["Admission", "Admitted", "NotTakingRuns", "BadSubmit", "QueueFull", "DiskLow", "new_run_id", "unstorable"]

log = get_logger("flower.service.api")


class NotTakingRuns(ServiceError):
    """The service refuses every run (the guard canary failed); the message is the canary's sentence."""


class BadSubmit(ServiceError, ValueError):
    """The ask or its options cannot be run; the message says which and how."""


class QueueFull(ServiceError):
    """The tenant already has its cap of queued runs: nothing was queued; submit again once some have started."""


class DiskLow(ServiceError):
    """The service's disk is full or below its free-space floor: nothing was queued; submit again later."""


_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
_SURROGATE = re.compile(r"[\ud800-\udfff]")


def unstorable(text: str) -> str | None:
    """What in ``text`` the registry cannot keep or a terminal should never get, said for a sentence: a NUL byte
    (PostgreSQL's text refuses it), half of a UTF-16 surrogate pair (no UTF-8 for it) or another control
    character (tab, newline and carriage return are text); None when there is none."""
    if "\x00" in text:
        return f"a NUL byte (\\u0000, at character {text.index(chr(0)) + 1})"
    found = _SURROGATE.search(text)
    if found:
        return f"half of a UTF-16 surrogate pair (\\u{ord(found.group()):04x}, at character {found.start() + 1})"
    found = _CONTROL.search(text)
    if found:
        return f"a control character (\\u{ord(found.group()):04x}, at character {found.start() + 1})"
    return None


def new_run_id() -> str:
    """Sortable by time, with 128 random bits: nobody guesses another tenant's run."""
    return time.strftime("%Y%m%d-%H%M%S", time.gmtime()) + "-" + secrets.token_hex(16)


@dataclass(frozen=True)
class Admitted:
    run: Run
    branch: str
    """Where its work will be (``flower/<run>``)."""


class Admission:
    def __init__(self, config: ServiceConfig, runs: RunsTable, health: Health, *,
                 refusal: Callable[[], str | None], wake: Callable[[], None]) -> None:
        self.config = config
        self.runs = runs
        self.health = health
        self._refusal = refusal  # read at each submit: the canary sets it while the service runs
        self._wake = wake

    async def submit(self, tenant: Tenant, ask: str, options: dict[str, object], *,
                     run_id: str | None = None) -> Admitted:
        """Queue ``ask`` as a new run of ``tenant``, or raise why not (nothing is queued then). ``run_id``: the
        id a schedule's tick derived (``service.control.schedules``), else a new one."""
        refusal = self._refusal()
        if refusal:
            raise NotTakingRuns(refusal)
        ask = ask.strip()
        if not ask:
            raise BadSubmit("`ask` is blank: say what you want done")
        bad = unstorable(ask)
        if bad:
            raise BadSubmit(f"`ask` holds {bad}, which no run can be given: remove it and submit again")
        try:
            tenant.check_options(options)
        except TenantNotReady as e:
            raise BadSubmit(str(e)) from None
        cap = tenant.max_queued or self.config.max_queued_per_tenant
        if self.runs.count(statuses=["queued"], tenant=tenant.name) >= cap:  # before the slow checks below
            raise self._full(tenant, cap)
        if run_id is None:
            run_id = new_run_id()
            while self.runs.ids_starting(short_of(run_id), tenant=tenant.name, limit=1, hex_part=True):
                run_id = new_run_id()  # its short id must name it alone among the tenant's runs
        try:
            spec = RunSpec(run_id=run_id, tenant=tenant.name, ask=ask, options=dict(options), env={})
        except (ValueError, TypeError, msgspec.ValidationError) as e:
            raise BadSubmit(f"invalid options: {e}") from None
        try:
            layout = RunLayout(self.config.runs_root, run_id, Path(tenant.repo).name)
            await asyncio.to_thread(tenant.check_ready)
        except TenantNotReady:
            raise
        except ValueError as e:
            raise TenantNotReady(f"tenant {tenant.name} cannot run here: {e}",
                                 public=f"tenant {tenant.name} cannot run here") from None
        disk = self.health.disk(fresh=True)
        if disk.low:
            raise DiskLow(f"the service is low on disk space ({disk.sentence()}): nothing was queued; "
                          "submit again once the operator has freed space")
        try:
            run = self.runs.create_queued(id=run_id, tenant=tenant.name, ask=ask, options=spec.options,
                                              repo=tenant.repo, cap=cap)
        except Exception as e:  # noqa: BLE001 - whichever database: a full disk is the one it says so for
            if not is_disk_full(e):
                raise
            self.health.disk_full_seen()
            raise DiskLow("the service's disk is full: nothing was queued; submit again once the "
                          "operator has freed space") from None
        if run is None:
            raise self._full(tenant, cap)
        log.info("run.submitted", tenant=tenant.name, run=run.id, options=sorted(options))
        self._wake()
        return Admitted(run, layout.branch)

    @staticmethod
    def _full(tenant: Tenant, cap: int) -> QueueFull:
        return QueueFull(f"tenant {tenant.name} already has {cap} runs waiting to start (its cap): nothing was "
                         "queued; submit again once some have started, or cancel some")
