"""What a run may still spend: every model call is admitted against its tenant's budgets, every answer metered.

Money is counted by the gateway, on the wire (``on_usage``): tokens and cost go onto the run's row and the
tenant's day, and a ``budget_usd`` crossed stops the run with a sentence saying so (``stop``, the scheduler's).
A call is let through only while what is spent and held by the calls in flight (each holding the most it can
cost, ``Grant.reserved``) stays under a cap, so however many calls run at once a budget is passed by at most the
one call let in last.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from .gateway import Gateway, Grant
from .logging import get_logger
from .metrics import Metrics
from .registry import Registry, Run
from .tenants import Tenant, Tenants
from .wire import Usage

__all__ = ["Budgets", "day_of"]

log = get_logger("flower.service.scheduler")


def day_of(t: float | None = None) -> str:
    """The UTC day a spend is counted on (YYYY-MM-DD)."""
    return time.strftime("%Y-%m-%d", time.gmtime(time.time() if t is None else t))


class Budgets:
    """Bound to ``gateway``: its ``admit`` and ``on_usage`` are ours. ``stop(run_id, why)`` stops a run over
    budget (its grant already answers 403). Without a gateway (it runs in a process of its own, which holds the
    other side of this class), the scheduler asks ``over`` of each running run's row every pass."""

    def __init__(self, registry: Registry, tenants: Tenants, gateway: Gateway | None, metrics: Metrics,
                 stop: Callable[[str, str], None]) -> None:
        self.registry = registry
        self.tenants = tenants
        self.gateway = gateway or Gateway()
        self.metrics = metrics
        self._stop = stop
        self.gateway.on_usage = self.metered
        self.gateway.admit = self.admit

    def metered(self, grant: Grant, usage: Usage) -> None:
        """One answer measured by the gateway: onto the run and the tenant's day; budgets checked."""
        self.registry.add_usage(grant.run_id, grant.tenant, day_of(), input_tokens=usage.input_tokens,
                                output_tokens=usage.output_tokens,
                                cache_write_tokens=usage.cache_creation_input_tokens,
                                cache_read_tokens=usage.cache_read_input_tokens, cost_usd=usage.cost_usd)
        self.metrics.model_usage(grant.tenant, cost_usd=usage.cost_usd, tokens={
            "input": usage.input_tokens, "output": usage.output_tokens,
            "cache_write": usage.cache_creation_input_tokens, "cache_read": usage.cache_read_input_tokens})
        tenant = self.tenants.get(grant.tenant)
        if tenant is not None and self.gateway.grant(grant.run_id) is grant:  # an answer read on past the run's end
            self.check(grant, tenant)

    def over_day(self, tenant: Tenant) -> str | None:
        """Why ``tenant`` may spend nothing more today, or None."""
        cap = tenant.budget_usd.day
        if cap is None:
            return None
        spent = self.registry.spent(tenant.name, day_of())["cost_usd"]
        if spent < cap:
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
        """Spent at a cap: the run is stopped (for the day's cap, every run of the tenant)."""
        over = self.over_run(grant.usage.cost_usd, tenant)
        if over:
            self._overspend(grant, over)
            return
        over = self.over_day(tenant)
        if over:
            for g in self.gateway.grants(tenant=tenant.name):
                self._overspend(g, over)

    def admit(self, grant: Grant) -> str | None:
        """Before the gateway forwards a call: None when the budgets have room beside the calls in flight; else why
        not. Spent alone at a cap stops the run (403 from then on); held by calls in flight, the call waits for
        them (429: the CLI retries, and a subagent is not lost to a budget that is only promised)."""
        tenant = self.tenants.get(grant.tenant)
        if tenant is None:
            return None
        self.check(grant, tenant)
        if grant.refused:
            return grant.refused
        cap = tenant.budget_usd.run
        if cap is not None and grant.usage.cost_usd + grant.reserved >= cap:
            return (f"over budget for now: this run has spent ${grant.usage.cost_usd:.4f} and its calls in flight "
                    f"may cost ${grant.reserved:.4f} more of its ${cap:.2f} per-run budget (tenant {tenant.name}, "
                    "measured by the model gateway); retry once they are answered, or raise `budget_usd.run`")
        day = tenant.budget_usd.day
        if day is not None:
            spent = self.registry.spent(tenant.name, day_of())["cost_usd"]
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
        log.warning("run.over_budget", tenant=grant.tenant, run=grant.run_id, error=why)
        self._stop(grant.run_id, why)
