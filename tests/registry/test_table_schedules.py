"""The schedules and their fires (``SchedulesTable``): a due tick is held by one replica of many racing for it, a
holder whose hold ran out writes nothing once another took the tick, a fire is recorded once per tick, and a
trigger's fires taken at once stop at its cap."""

from __future__ import annotations

import msgspec

from service.registry import Registry
from service.registry.schedules import Fire

from _tables import ACME, together


def _schedule(registry: Registry, *, next_at: float | None = 60.0, budget: float | None = 1.5) -> str:
    made = registry.schedules.create(id="sch-1", tenant="acme", ask="look at the flaky tests", options={"rounds": 2},
                                     cron="* * * * *", timezone="Europe/Paris", budget_usd=budget, overlap="skip",
                                     created=1.0, next_at=next_at)
    assert (made.options, made.timezone, made.paused, made.generation) == ({"rounds": 2}, "Europe/Paris", False, 0)
    return made.id


def test_twenty_replicas_racing_for_a_due_tick_hold_it_once_and_a_lapsed_holder_writes_nothing(registry: Registry):
    sid = _schedule(registry)
    assert registry.schedules.due(now=59.0) == [], "not due before its tick"
    assert [s.id for s in registry.schedules.due(now=61.0)] == [sid]
    holds = together(20, lambda i: registry.schedules.hold(sid, 60.0, f"r{i}", now=61.0, ttl=10))
    held = [h for h in holds if h is not None]
    assert len(held) == 1, "one replica holds the tick"
    first = held[0]
    assert first.generation == 1  # type: ignore[union-attr]
    assert registry.schedules.due(now=65.0) == [], "held: no other replica sees it due"
    assert registry.schedules.hold(sid, 60.0, "other", now=65.0, ttl=10) is None
    second = registry.schedules.hold(sid, 60.0, "other", now=72.0, ttl=10)  # the first holder's hold ran out
    assert second is not None and second.generation == 2
    assert registry.schedules.advance(first, 120.0, last_run=ACME[0]) is False, "the lapsed holder is fenced off"  # type: ignore[arg-type]
    assert registry.schedules.still_held(second) and not registry.schedules.still_held(first)  # type: ignore[arg-type]
    assert registry.schedules.advance(second, 120.0, last_run=ACME[0]) is True
    after = registry.schedules.get(sid)
    assert after is not None and (after.next_at, after.holder, after.last_run) == (120.0, None, ACME[0])
    assert registry.schedules.hold(sid, 60.0, "late", now=200.0, ttl=10) is None, "a tick fired is not held again"


def test_a_tick_is_recorded_once_and_what_fired_a_run_is_read_back_with_its_budget(registry: Registry):
    sid = _schedule(registry)
    fire = Fire(schedule=sid, tick=60.0, tenant="acme", run=ACME[1], fired_by="schedule", outcome="started",
                why=None, budget_usd=1.5, at=61.0)
    assert registry.schedules.record(fire) == fire
    again = registry.schedules.record(msgspec.structs.replace(fire, run=ACME[2], at=99.0))
    assert again == fire, "a second record of the tick keeps the first"
    assert registry.schedules.fired(ACME[1]) == fire and registry.schedules.fired(ACME[2]) is None
    registry.runs.create(id=ACME[1], tenant="acme", ask="a", options={}, repo="/r")
    assert registry.spend.run_budget(ACME[1]) == 1.5, "the gateway reads the run's own budget"
    assert registry.spend.run_budget(ACME[3]) is None
    registry.schedules.refused(sid, 60.0, "no run was queued: the disk is full")
    assert [(f.outcome, f.run, f.why) for f in registry.schedules.history(sid)] == [
        ("refused", None, "no run was queued: the disk is full")]


def test_ten_trigger_fires_at_once_take_the_cap_and_the_window_moves_on(registry: Registry):
    sid = _schedule(registry, next_at=None)
    schedule = registry.schedules.get(sid)
    assert schedule is not None
    fires = together(10, lambda i: registry.schedules.take_trigger(schedule, now=1000.0, window_s=60, cap=3,
                                                                   run_id=lambda tick: f"run-{tick!r}"))
    taken = [f for f in fires if f is not None]
    assert len(taken) == 3, "the cap, across every caller at once"
    assert len({f.tick for f in taken}) == 3 and len({f.run for f in taken}) == 3  # type: ignore[union-attr]
    assert registry.schedules.take_trigger(schedule, now=1059.0, window_s=60, cap=3, run_id=str) is None
    later = registry.schedules.take_trigger(schedule, now=1061.0, window_s=60, cap=3, run_id=str)
    assert later is not None and later.fired_by == "trigger" and later.budget_usd == 1.5


def test_a_trigger_token_is_found_by_its_hash_until_revoked_and_pause_and_delete_hold(registry: Registry):
    sid = _schedule(registry)
    assert registry.schedules.set_trigger(sid, "a" * 64)
    found = registry.schedules.by_trigger("a" * 64)
    assert found is not None and found.id == sid
    assert registry.schedules.set_trigger(sid, None) and registry.schedules.by_trigger("a" * 64) is None
    paused = registry.schedules.pause(sid, True, next_at=60.0)
    assert paused is not None and paused.paused and registry.schedules.due(now=1e9) == []
    assert registry.schedules.hold(sid, 60.0, "r", now=61.0, ttl=10) is None, "a paused schedule is not held"
    assert [s.id for s in registry.schedules.of("acme")] == [sid] and registry.schedules.of("beta") == []
    assert registry.schedules.delete(sid) and registry.schedules.get(sid) is None
    assert not registry.schedules.delete(sid)
