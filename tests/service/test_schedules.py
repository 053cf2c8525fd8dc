"""``Schedules`` on a clock the test moves: each tick fires once, a service down over several ticks runs one late
run (never a burst), and a tick that comes while the last run is live skips, queues or cancels it as its schedule
says — with the real registry (SQLite file), tenants file, repository and submit rules (``Admission``)."""

from __future__ import annotations

import calendar
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from service.clock import ManualClock
from service.config import ServiceConfig
from service.control.admission import Admission
from service.control.health import Health
from service.control.schedules import BadSchedule, Schedules, tick_run_id
from service.control.triggers import TriggerPaced, TriggerPaused, Triggers, TriggerUnknown
from service.registry import Registry
from service.registry.schedules import Overlap
from service.tenants import Tenant, Tenants

pytestmark = pytest.mark.asyncio

T0 = float(calendar.timegm((2031, 3, 10, 2, 59, 30)))  # 2031-03-10 02:59:30 UTC, a day no test runs on
HOUR = 3600.0


@dataclass
class World:
    schedules: Schedules
    registry: Registry
    tenant: Tenant
    clock: ManualClock
    cancelled: list[str]

    def cancel(self, run_id: str) -> None:
        """What the mailbox does (``Mailbox.request_cancel``): a queued run ends at once."""
        self.cancelled.append(run_id)
        self.registry.runs.cancel(run_id, at=self.clock.now())


def world(tmp_path: Path, git_repo: Callable[..., Path], *, tenant_extra: str = "",
          owner: str = "replica-a") -> World:
    repo = git_repo(tmp_path / "repos" / "acme")
    creds = tmp_path / "acme.env"
    creds.write_text("ANTHROPIC_API_KEY=sk-test-not-used\n")
    tenants = tmp_path / "tenants.toml"
    tenants.write_text(f'[[tenant]]\nname = "acme"\ntoken = "acme-token-0123456789"\nrepo = "{repo}"\n'
                       f'credentials = "{creds}"\nallowed_options = ["rounds"]\n{tenant_extra}')
    cfg = ServiceConfig(data_dir=str(tmp_path / "data"), backend="local", min_free_mb=0, guard_canary=False,
                        tenants=str(tenants))
    cfg.data_path.mkdir(parents=True, exist_ok=True)
    registry = Registry(cfg.db_path)
    tenant = Tenants(cfg.tenants).get("acme")
    assert tenant is not None
    clock = ManualClock(T0)
    admission = Admission(cfg, registry.runs, Health(cfg.data_path, 0, "local"), refusal=lambda: None,
                          wake=lambda: None)
    w = World(schedules=None, registry=registry, tenant=tenant, clock=clock, cancelled=[])  # type: ignore[arg-type]
    w.schedules = Schedules(cfg, registry.schedules, registry.runs, Tenants(cfg.tenants), admission, w.cancel,
                            owner=owner, clock=clock)
    return w


async def test_each_tick_fires_once_and_ticks_missed_while_down_run_once_late_then_the_next_on_time(
        tmp_path: Path, git_repo: Callable[..., Path]) -> None:
    w = world(tmp_path, git_repo)
    made = w.schedules.create(w.tenant, ask="look at the flaky tests", options={"rounds": 2}, cron="0 * * * *",
                              timezone="UTC", budget_usd=1.0, overlap="skip")
    assert made.next_at == T0 + 30
    w.clock.advance(29)
    assert await w.schedules.fire_due() == [], "not before its tick"
    w.clock.advance(5)
    first = await w.schedules.fire_due()
    assert [(f.tick, f.outcome, f.run) for f in first] == [(T0 + 30, "started", tick_run_id(made.id, T0 + 30))]
    run = w.registry.runs.get(first[0].run or "")
    assert run is not None and (run.status, run.ask, run.options) == ("queued", "look at the flaky tests", {"rounds": 2})
    assert await w.schedules.fire_due() == [], "a tick fires once"
    w.cancel(run.id)  # it ended: the next tick is not held back by it

    w.clock.advance(5 * HOUR + 10 * 60)  # down from 03:00:34 to 08:10:34: the ticks of 04:00 … 08:00 were missed
    late = await w.schedules.fire_due()
    assert [(f.tick, f.outcome) for f in late] == [(T0 + 30 + HOUR, "started")], "one late run, not five"
    after = w.registry.schedules.get(made.id)
    assert after is not None and after.next_at == T0 + 30 + 6 * HOUR, "then on to the first tick after now (09:00)"
    assert await w.schedules.fire_due() == []
    assert len(w.registry.runs.list()) == 2
    assert [f.tick for f in w.registry.schedules.history(made.id)] == [T0 + 30 + HOUR, T0 + 30]


@pytest.mark.parametrize("overlap", ["skip", "queue", "cancel"])
async def test_a_tick_while_the_last_run_is_live_skips_queues_or_cancels_it(
        tmp_path: Path, git_repo: Callable[..., Path], overlap: Overlap) -> None:
    w = world(tmp_path, git_repo)
    made = w.schedules.create(w.tenant, ask="nightly", options={}, cron="0 * * * *", timezone="UTC",
                              budget_usd=None, overlap=overlap)
    w.clock.advance(31)
    [first] = await w.schedules.fire_due()
    assert first.run is not None
    w.clock.advance(HOUR)  # 04:00:01: the first run is still queued (live)
    second = await w.schedules.fire_due()
    runs = {r.id: r.status for r in w.registry.runs.list()}
    if overlap == "skip":
        assert [(f.outcome, f.run) for f in second] == [("skipped", None)]
        assert second[0].why == f"run {first.run} of this schedule is still live (overlap: skip)"
        assert runs == {first.run: "queued"}
    elif overlap == "cancel":
        assert [f.outcome for f in second] == ["started"] and w.cancelled == [first.run]
        assert runs == {first.run: "cancelled", second[0].run: "queued"}
    else:
        assert second == [] and runs == {first.run: "queued"}, "it waits for the live run"
        w.clock.advance(2 * HOUR)  # 06:00:01: two more ticks came while it waited
        assert await w.schedules.fire_due() == [] and len(w.registry.runs.list()) == 1
        w.cancel(first.run)  # the live run ended
        queued = await w.schedules.fire_due()
        assert [(f.tick, f.outcome) for f in queued] == [(T0 + 30 + HOUR, "started")], "the one that waited"
        assert await w.schedules.fire_due() == [], "at most one waited: the missed ones are not run"
        nxt = w.registry.schedules.get(made.id)
        assert nxt is not None and nxt.next_at == T0 + 30 + 4 * HOUR


@pytest.mark.parametrize("cron, timezone, budget, says", [
    ("61 * * * *", "UTC", None, "cron expression '61 * * * *' does not parse: give five fields"),
    ("every day", "UTC", None, "does not parse"),
    ("*/2 * * * *", "UTC", None, "fires every 120 s at times, more often than this tenant may schedule (every "
                                 "300 s at most)"),
    ("0 3 * * *", "Mars/Olympus", None, "timezone 'Mars/Olympus' does not exist: give an IANA name"),
    ("0 3 * * *", "UTC", 9.0, "budget_usd 9 is more than tenant acme's per-run budget (5)"),
])
async def test_a_schedule_that_cannot_be_kept_is_refused_with_why_and_nothing_is_made(
        tmp_path: Path, git_repo: Callable[..., Path], cron: str, timezone: str, budget: float | None,
        says: str) -> None:
    w = world(tmp_path, git_repo, tenant_extra="budget_usd = { run = 5.0 }\n")
    with pytest.raises(BadSchedule) as refused:
        w.schedules.create(w.tenant, ask="x", options={}, cron=cron, timezone=timezone, budget_usd=budget,
                           overlap="skip")
    assert says in str(refused.value)
    assert w.registry.schedules.of("acme") == []


async def test_a_tenant_may_be_allowed_a_shorter_interval_and_a_cron_in_a_timezone_ticks_in_it(
        tmp_path: Path, git_repo: Callable[..., Path]) -> None:
    w = world(tmp_path, git_repo, tenant_extra="schedule_min_interval_s = 60\n")
    every = w.schedules.create(w.tenant, ask="x", options={}, cron="* * * * *", timezone="UTC", budget_usd=None,
                               overlap="skip")
    assert every.next_at == T0 + 30
    paris = w.schedules.create(w.tenant, ask="y", options={}, cron="0 9 * * *", timezone="Europe/Paris",
                               budget_usd=None, overlap="skip")
    assert paris.next_at == float(calendar.timegm((2031, 3, 10, 8, 0, 0))), "09:00 in Paris is 08:00 UTC in March"
    paused = w.schedules.pause(every, True)
    w.clock.advance(10 * 60)
    assert await w.schedules.fire_due() == [], "a paused schedule does not tick"
    resumed = w.schedules.pause(paused, False)
    assert resumed.next_at == T0 + 30 + 10 * 60, "from the first tick after now: none missed is run"


async def test_a_trigger_starts_its_rate_a_minute_with_its_text_and_a_revoked_or_replaced_token_starts_nothing(
        tmp_path: Path, git_repo: Callable[..., Path]) -> None:
    w = world(tmp_path, git_repo)
    triggers = Triggers(w.schedules.config, w.registry.schedules, w.schedules.admission, w.schedules.tenants,
                        clock=w.clock)
    saved = w.schedules.create(w.tenant, ask="CI failed: fix it", options={}, cron=None, timezone="UTC",
                               budget_usd=0.5, overlap="skip")
    other = w.schedules.create(w.tenant, ask="other", options={}, cron=None, timezone="UTC", budget_usd=None,
                               overlap="skip")
    token, theirs = triggers.issue(saved), triggers.issue(other)
    fired = [await triggers.fire(saved.id, token, f"FAILED test_{i}") for i in range(3)]
    assert [(f.fired_by, f.outcome, f.budget_usd) for f in fired] == [("trigger", "started", 0.5)] * 3
    asks = {r.ask for r in w.registry.runs.list()}
    assert asks == {f"CI failed: fix it\n\nFAILED test_{i}" for i in range(3)}
    with pytest.raises(TriggerPaced, match="started its 3 runs of the last minute"):
        await triggers.fire(saved.id, token, None)
    w.clock.advance(61)
    assert (await triggers.fire(saved.id, token, None)).outcome == "started", "a new minute"
    with pytest.raises(TriggerUnknown, match="fires no trigger of schedule"):
        await triggers.fire(saved.id, theirs, None)  # another schedule's token
    w.schedules.pause(w.registry.schedules.get(saved.id) or saved, True)
    with pytest.raises(TriggerPaused, match="is paused"):
        await triggers.fire(saved.id, token, None)
    w.schedules.pause(w.registry.schedules.get(saved.id) or saved, False)
    replaced = triggers.issue(saved)
    with pytest.raises(TriggerUnknown):
        await triggers.fire(saved.id, token, None)  # the old one stopped
    triggers.revoke(saved)
    with pytest.raises(TriggerUnknown):
        await triggers.fire(saved.id, replaced, None)
    assert len(w.registry.runs.list()) == 4
    assert {w.registry.spend.run_budget(r.id) for r in w.registry.runs.list()} == {0.5}
