"""What a run may still spend: the model gateway's ``Meter`` — every Messages call admitted against its tenant's
budgets before it is forwarded, every answer settled from what the upstream reported.

The money lives in the registry, not in a gateway: a call is let through only when its hold (the most it can
cost, ``wire.most_cost``) fits beside the run's and the tenant's day's spent and held under their caps — checked and
written in one transaction (``Registry.hold``) — and its answer replaces the hold with what it cost
(``Registry.add_usage``). So however many calls run at once, through however many gateway processes on one
database, no budget is ever passed. A call that can never fit — spent at a cap, or less left than its most, or a
most over the whole cap — ends the run (403, and ``stop``, the scheduler's, ends it with a sentence that says to
raise the budget or lower ``max_tokens``); one that fits but for calls in flight is refused for now (429: the CLI
retries, and a subagent is not lost to money that is only promised). A registry that cannot be reached admits
nothing (429).
"""

from __future__ import annotations

import asyncio
import secrets
import time
from collections.abc import Callable
from typing import TypeVar

import msgspec

from ..clock import SYSTEM, Clock
from ..control.live import one_line
from ..logging import get_logger
from ..metrics import Metrics
from ..registry import Run, SpendTable, Spent, Standing
from ..tenants import Budget, Tenant, Tenants
from .grant import Grant, Held, Refused
from .server import Gateway
from .wire import Usage

__all__ = ["Budgets", "day_of", "HOLD_S", "RENEW_HOLDS_S"]

log = get_logger("flower.service.scheduler")
T = TypeVar("T")

HOLD_S = 900.0
"""A hold nobody settles stops counting after this: its gateway died with the call in flight (a live gateway renews
its holds every ``RENEW_HOLDS_S``, however long its calls take). A gateway started again under its name lets its own
go at once."""
RENEW_HOLDS_S = HOLD_S / 4
HELD_BACK_S = 0.25  # a call refused for now: the run's next ones are refused without a registry check this long
SETTLE_TRIES = 5  # an answer's cost written to a registry that failed a moment: tried this many times, a second apart


def day_of(t: float) -> str:
    """The UTC day a spend is counted on (YYYY-MM-DD): the day its call was let through."""
    return time.strftime("%Y-%m-%d", time.gmtime(t))


class Budgets:
    """``gateway``'s meter. ``owner`` names the holds this gateway takes; ``stop(run_id, why)`` stops a run over
    budget (its grant answers 403 already). Without a gateway in this process (it runs in one of its own, which
    holds the other side of this class) the scheduler asks ``over`` of each running run's row every pass."""

    def __init__(self, spend: SpendTable, tenants: Tenants, gateway: Gateway | None, metrics: Metrics,
                 stop: Callable[[str, str], None], *, owner: str, clock: Clock = SYSTEM) -> None:
        self.clock = clock
        self.spend = spend
        self.tenants = tenants
        self.gateway = gateway or Gateway()
        self.metrics = metrics
        self.owner = owner
        self._stop = stop
        self._renewed = self.clock.monotonic()
        self.gateway.meter = self

    # -- the gateway's meter -----------------------------------------------------------------
    async def admit(self, grant: Grant, most: float) -> Held | Refused:
        """Let a call through holding ``most`` USD, or say why not (``Refused.final``: spent at a cap)."""
        tenant = self._tenant_of(grant)
        day = day_of(self.clock.now())
        if tenant is None or (tenant.budget_usd.run is None and tenant.budget_usd.day is None):
            return Held(id=None, day=day)  # no cap to hold against
        if grant.held_back is not None and self.clock.monotonic() < grant.held_back[0]:
            return Refused(grant.held_back[1], final=False)
        hold = secrets.token_hex(12)
        try:
            standing = await asyncio.to_thread(
                self.spend.hold, hold, run_id=grant.run_id, tenant=tenant.name, day=day, amount=most,
                owner=self.owner, now=self.clock.now(), ttl=HOLD_S, run_cap=tenant.budget_usd.run,
                day_cap=tenant.budget_usd.day)
        except Exception as e:  # noqa: BLE001 - the registry away: nothing is let through that cannot be held
            log.warning("gateway.hold_failed", tenant=grant.tenant, run=grant.run_id,
                        error=f"{type(e).__name__}: {one_line(e, 300)}")
            return Refused(f"the service cannot check this run's budget right now ({type(e).__name__}: its "
                           "registry did not answer); retry in a moment", final=False)
        if standing is None:
            why = f"run {grant.run_id} is no longer in the service's registry: it may spend nothing more"
            self._overspend(grant, why)
            return Refused(why, final=True)
        if standing.taken:
            grant.held_back = None
            return Held(id=hold, day=day)
        refused = self._refused(grant, tenant, standing, most)
        if not refused.final:
            grant.held_back = (self.clock.monotonic() + HELD_BACK_S, refused.why)
        return refused

    def _tenant_of(self, grant: Grant) -> Tenant | None:
        """The grant's tenant, its per-run budget the tighter of its own and the run's (a schedule's budget)."""
        tenant = self.tenants.get(grant.tenant)
        own = grant.budget_usd
        if tenant is None or own is None:
            return tenant
        run = own if tenant.budget_usd.run is None else min(own, tenant.budget_usd.run)
        return msgspec.structs.replace(tenant, budget_usd=Budget(run=run, day=tenant.budget_usd.day))

    async def settle(self, grant: Grant, held: Held, usage: Usage | None) -> None:
        """The call's hold replaced by what it cost (onto the run and the tenant's day), or let go when nothing came
        back; a cap reached stops the run (the day's: every run of the tenant)."""
        hold = held.id
        if usage is None:
            if hold is not None:
                await self._registry_write(grant, lambda: self.spend.release_hold(hold), {"release": hold})
            return
        self.metrics.model_usage(grant.tenant, cost_usd=usage.cost_usd, tokens={
            "input": usage.input_tokens, "output": usage.output_tokens,
            "cache_write": usage.cache_creation_input_tokens, "cache_read": usage.cache_read_input_tokens})
        spent = await self._registry_write(grant, lambda: self.spend.add_usage(
            grant.run_id, grant.tenant, held.day, input_tokens=usage.input_tokens, output_tokens=usage.output_tokens,
            cache_write_tokens=usage.cache_creation_input_tokens, cache_read_tokens=usage.cache_read_input_tokens,
            cost_usd=usage.cost_usd, hold=hold), {"day": held.day, **msgspec.structs.asdict(usage)})
        tenant = self._tenant_of(grant)
        if spent is not None and tenant is not None and self.gateway.grant(grant.run_id) is grant:
            self._check(grant, tenant, spent)  # (an answer read on past the run's end stops nothing)

    async def _registry_write(self, grant: Grant, write: Callable[[], T], what: dict[str, object]) -> T | None:
        """A metering write, tried again for a few seconds: an answer's cost is never dropped for a passing fault,
        and one that cannot be written is logged whole (``what``: the figures an operator adds by hand)."""
        for attempt in range(SETTLE_TRIES):
            try:
                return await asyncio.to_thread(write)
            except Exception as e:  # noqa: BLE001 - the registry away for a moment
                if attempt == SETTLE_TRIES - 1:
                    log.error("gateway.meter_lost", tenant=grant.tenant, run=grant.run_id,
                              error=f"{type(e).__name__}: {one_line(e, 300)}",
                              hint="this write did not reach the registry; make it by hand", **what)
                    return None
                await asyncio.sleep(1.0)
        return None

    def renew_due(self) -> None:
        """Blocking, from a periodic pass: every ``RENEW_HOLDS_S``, this gateway's holds kept for another ``HOLD_S``
        (a call may stream for longer than a hold lasts)."""
        now = self.clock.monotonic()
        if now - self._renewed < RENEW_HOLDS_S:
            return
        self._renewed = now
        self.spend.renew_holds(self.owner, now=self.clock.now(), ttl=HOLD_S)

    # -- what a cap says ---------------------------------------------------------------------
    def over_day(self, tenant: Tenant) -> str | None:
        """Why ``tenant`` may spend nothing more today, or None."""
        if tenant.budget_usd.day is None:
            return None
        return self._over_day(self.spend.spent(tenant.name, day_of(self.clock.now()))["cost_usd"], tenant)

    @staticmethod
    def _over_day(spent: float, tenant: Tenant) -> str | None:
        cap = tenant.budget_usd.day
        if cap is None or spent < cap:
            return None
        return (f"over budget: tenant {tenant.name} has spent ${spent:.4f} of its ${cap:.2f} daily budget today "
                "(UTC, measured by the model gateway); the run was stopped — raise `budget_usd.day` or wait "
                "for tomorrow")

    @staticmethod
    def over_run(spent: float, tenant: Tenant) -> str | None:
        """Why a run of ``tenant`` that spent ``spent`` may spend nothing more, or None."""
        cap = tenant.budget_usd.run
        if cap is None or spent < cap:
            return None
        return (f"over budget: this run has spent ${spent:.4f} of its ${cap:.2f} per-run budget (tenant "
                f"{tenant.name}, measured by the model gateway); the service stopped it — raise `budget_usd.run` "
                "to allow more")

    def over(self, run: Run, tenant: Tenant) -> str | None:
        """Why the run (its row: what the gateway's process metered) must be stopped for money, or None."""
        return self.over_run(run.cost_usd, tenant) or self.over_day(tenant)

    def check(self, grant: Grant, tenant: Tenant) -> None:
        """A grant (re)opened: a run already spent at a cap is refused from the start."""
        self._check(grant, tenant, Spent(run=grant.usage.cost_usd, day=self.spend.spent(
            tenant.name, day_of(self.clock.now()))["cost_usd"] if tenant.budget_usd.day is not None else 0.0))

    def _check(self, grant: Grant, tenant: Tenant, spent: Spent) -> None:
        """Spent at a cap: the run is stopped (for the day's cap, every run of the tenant this gateway serves)."""
        over = self.over_run(spent.run, tenant)
        if over:
            self._overspend(grant, over)
            return
        over = self._over_day(spent.day, tenant)
        if over:
            for g in self.gateway.grants(tenant=tenant.name):
                self._overspend(g, over)

    def _refused(self, grant: Grant, tenant: Tenant, standing: Standing, most: float) -> Refused:
        """Why a call found no room: spent alone at a cap, or too little left for the call's ``most`` (final: the
        run is stopped), else held by the calls in flight (for now)."""
        self._check(grant, tenant, Spent(run=standing.run_spent, day=standing.day_spent))
        if grant.refused:
            return Refused(grant.refused, final=True)
        too_much = self._too_much(tenant, standing, most)
        if too_much is not None:
            self._overspend(grant, too_much)
            return Refused(too_much, final=True)
        cap = tenant.budget_usd.run
        if cap is not None and standing.run_spent + standing.run_held + most > cap:
            return Refused(f"over budget for now: this run has spent ${standing.run_spent:.4f} and its calls in "
                           f"flight may cost ${standing.run_held:.4f} more of its ${cap:.2f} per-run budget (tenant "
                           f"{tenant.name}, measured by the model gateway), with no room for this call's "
                           f"${most:.4f}; retry once they are answered, or raise `budget_usd.run`", final=False)
        return Refused(f"over budget for now: tenant {tenant.name} has spent ${standing.day_spent:.4f} today and its "
                       f"calls in flight may cost ${standing.day_held:.4f} more of its ${tenant.budget_usd.day:.2f} "
                       f"daily budget (UTC, measured by the model gateway), with no room for this call's "
                       f"${most:.4f}; retry once they are answered, or raise `budget_usd.day`", final=False)

    @staticmethod
    def _too_much(tenant: Tenant, standing: Standing, most: float) -> str | None:
        """Why a call can never fit, whatever the calls in flight bring back (spent only grows): the most it can
        cost is more than its budget has left — or than the whole budget — or None."""
        lower = "lower the calls' `max_tokens` (`CLAUDE_CODE_MAX_OUTPUT_TOKENS` in the tenant's credentials file)"
        run, day = tenant.budget_usd.run, tenant.budget_usd.day
        if run is not None and standing.run_spent + most > run:
            if most > run:
                return (f"over budget: a model call of this run may cost up to ${most:.4f} (all of its `max_tokens` "
                        f"and its input), more than its whole ${run:.2f} per-run budget (tenant {tenant.name}, "
                        f"measured by the model gateway); the service stopped it — {lower} or raise `budget_usd.run`")
            return (f"over budget: this run has spent ${standing.run_spent:.4f} of its ${run:.2f} per-run budget "
                    f"and its next model call may cost up to ${most:.4f}, more than is left (tenant {tenant.name}, "
                    f"measured by the model gateway); the service stopped it — raise `budget_usd.run`, or {lower}")
        if day is not None and standing.day_spent + most > day:
            if most > day:
                return (f"over budget: a model call of this run may cost up to ${most:.4f} (all of its `max_tokens` "
                        f"and its input), more than tenant {tenant.name}'s whole ${day:.2f} daily budget (measured "
                        f"by the model gateway); the service stopped the run — {lower} or raise `budget_usd.day`")
            return (f"over budget: tenant {tenant.name} has spent ${standing.day_spent:.4f} today of its ${day:.2f} "
                    f"daily budget (UTC) and this run's next model call may cost up to ${most:.4f}, more than is "
                    f"left (measured by the model gateway); the service stopped the run — raise `budget_usd.day` "
                    f"or wait for tomorrow, or {lower}")
        return None

    def _overspend(self, grant: Grant, why: str) -> None:
        if grant.refused:
            return
        grant.refused = why  # the gateway answers 403 from now on: not one more token is spent
        log.warning("run.over_budget", tenant=grant.tenant, run=grant.run_id, error=why)
        self._stop(grant.run_id, why)
