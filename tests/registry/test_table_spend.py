"""The money tables (``SpendTable``): usage added by many threads sums exactly, holds taken at once never pass the
caps they leave room for, a settled hold becomes spend and a dead gateway's holds go."""

from __future__ import annotations

from typing import Any

from service.registry import Registry, Standing

from _tables import ACME, together


def test_usage_added_by_twenty_threads_at_once_sums_exactly(registry: Registry):
    registry.runs.create(id=ACME[0], tenant="acme", ask="a", options={}, repo="")

    def ten(_: int) -> None:
        for _ in range(10):
            registry.spend.add_usage(ACME[0], "acme", "2026-01-01", input_tokens=3, output_tokens=5, cache_write_tokens=7,
                                     cache_read_tokens=11, cost_usd=0.25)

    together(20, ten)
    run = registry.runs.get(ACME[0])
    assert run is not None
    assert (run.input_tokens, run.output_tokens, run.cache_write_tokens, run.cache_read_tokens, run.cost_usd) == \
        (600, 1000, 1400, 2200, 50.0)
    assert registry.spend.spent("acme", "2026-01-01") == {"cost_usd": 50.0, "input_tokens": 600, "output_tokens": 1000}
    assert registry.spend.spent("acme", "2026-01-02") == {"cost_usd": 0.0, "input_tokens": 0, "output_tokens": 0}
    assert registry.spend.spent("beta", "2026-01-01")["cost_usd"] == 0.0

def _hold(registry: Registry, hold_id: str, owner: str, **over: Any) -> Standing:
    args: dict[str, Any] = dict(run_id=ACME[0], tenant="acme", day="2026-01-01", amount=0.5, now=100.0, ttl=60,
                                run_cap=1.0, day_cap=None)
    standing = registry.spend.hold(hold_id, owner=owner, **{**args, **over})
    assert standing is not None
    return standing

def test_forty_holds_at_once_take_no_more_than_the_caps_leave_room_for(registry: Registry):
    for run_id in ACME[:2]:
        registry.runs.create(id=run_id, tenant="acme", ask="a", options={}, repo="")
    standings = [s for s in together(40, lambda i: _hold(  # $0.125 each: exact in binary, so are the sums
        registry, f"h{i}", "gw-a" if i % 2 else "gw-b", run_id=ACME[i % 2], amount=0.125, run_cap=0.5,
        day_cap=0.75)) if isinstance(s, Standing)]
    assert len(standings) == 40
    assert sum(s.taken for s in standings) == 6, "the day's $0.75 holds six calls, whichever run and gateway"
    assert all(sum(s.taken for s in standings[r::2]) <= 4 for r in (0, 1)), "a run's $0.50 holds four"
    refused = next(s for s in standings if not s.taken)
    assert refused.day_spent == 0.0 and refused.day_held >= 0.5

def test_a_settled_hold_becomes_spend_and_a_dead_gateways_holds_go(registry: Registry):
    registry.runs.create(id=ACME[0], tenant="acme", ask="a", options={}, repo="")
    assert _hold(registry, "h1", "gw-a").taken and _hold(registry, "h2", "gw-b").taken
    third = _hold(registry, "h3", "gw-b")
    assert not third.taken and (third.run_spent, third.run_held) == (0.0, 1.0)
    spent = registry.spend.add_usage(ACME[0], "acme", "2026-01-01", input_tokens=1, output_tokens=2, cache_write_tokens=0,
                                     cache_read_tokens=0, cost_usd=0.25, hold="h1")
    assert (spent.run, spent.day) == (0.25, 0.25)
    crossing = _hold(registry, "h4x", "gw-a")
    assert not crossing.taken, "$0.25 spent, $0.50 held: a call that may cost $0.50 would pass the $1.00"
    again = _hold(registry, "h4", "gw-a", amount=0.25)
    assert again.taken and (again.run_spent, again.run_held) == (0.25, 0.5), "one that may cost $0.25 fits exactly"
    assert registry.spend.release_holds("gw-b") == 1, "gw-b started again: its call in flight holds nothing more"
    registry.spend.release_hold("h4")
    later = _hold(registry, "h5", "gw-a", now=1000.0)
    assert later.taken and later.run_held == 0.0
    assert registry.spend.renew_holds("gw-a", now=1050.0, ttl=60) == 1, "h5's call is still in flight: kept to 1110"
    kept = _hold(registry, "h6", "gw-a", now=1061.0, run_cap=0.75)
    assert not kept.taken and kept.run_held == 0.5
    assert _hold(registry, "h7", "gw-a", now=1111.0).run_held == 0.0, "h5, never settled, ran out at its ttl"
    assert registry.spend.hold("h8", owner="gw-a", run_id="absent", tenant="acme", day="2026-01-01", amount=0.5, now=1.0,
                               ttl=60, run_cap=1.0, day_cap=None) is None
