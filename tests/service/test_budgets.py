"""``Budgets``, the gateway's meter, on the clock it is handed: a call's spend is counted on the UTC day it was let
through, and a tenant's daily cap starts afresh at UTC midnight — shown on a ``ManualClock`` a second before
midnight of a day no test runs on, moved on two seconds (no sleeping), with a real registry on a SQLite file."""

from __future__ import annotations

from pathlib import Path

from service.gateway.budgets import Budgets
from service.clock import ManualClock
from service.gateway import Gateway, Grant, Held
from service.metrics import Metrics
from service.registry import Registry
from service.tenants import Tenants
from service.gateway.wire import Usage

RUN = "20310101-235959-" + "c" * 32
LAST_SECOND = 1925078399.0  # 2031-01-01 23:59:59 UTC


async def test_a_spend_counts_on_the_utc_day_its_call_was_let_through_and_the_day_cap_starts_afresh_at_midnight(
        tmp_path: Path) -> None:
    (tmp_path / "tenants.toml").write_text(
        f'[[tenant]]\nname = "acme"\ntoken = "{"t" * 24}"\nrepo = "{tmp_path}"\ncredentials = "acme.env"\n'
        "budget_usd.day = 1.0\n")
    tenants = Tenants(tmp_path / "tenants.toml")
    acme = tenants.get("acme")
    assert acme is not None
    registry = Registry(tmp_path / "registry.sqlite3")
    registry.runs.create(id=RUN, tenant="acme", ask="a", options={}, repo=str(tmp_path))
    clock = ManualClock(LAST_SECOND)
    budgets = Budgets(registry.spend, tenants, Gateway(), Metrics(), lambda run, why: None, owner="test", clock=clock)
    grant = Grant(RUN, "acme", "0" * 64, "http://127.0.0.1:9", [])

    async def call(cost: float) -> Held:
        held = await budgets.admit(grant, 0.5)
        assert isinstance(held, Held), held
        await budgets.settle(grant, held, Usage(input_tokens=10, output_tokens=5, cost_usd=cost))
        return held

    before = await call(1.0)
    assert before.day == "2031-01-01" and registry.spend.spent("acme", "2031-01-01")["cost_usd"] == 1.0
    assert budgets.over_day(acme) is not None, "the day's cap is spent"
    clock.advance(2)  # 2031-01-02 00:00:01 UTC
    assert budgets.over_day(acme) is None, "a new UTC day: the cap starts afresh"
    after = await call(0.25)
    assert after.day == "2031-01-02"
    assert registry.spend.spent("acme", "2031-01-02")["cost_usd"] == 0.25
    assert registry.spend.spent("acme", "2031-01-01")["cost_usd"] == 1.0, "yesterday's spend stays yesterday's"
    registry.close()
