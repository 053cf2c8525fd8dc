"""The queue's two queries, on SQLite and PostgreSQL: a pass reads each tenant's oldest few queued runs, never the
whole queue; and a tenant's queued runs never pass its cap, however many submits race on however many replicas."""

from __future__ import annotations

from service.registry import Registry

from _tables import together


def _id(tenant: str, i: int) -> str:
    return f"20260101-0000{i:02d}-{tenant[0] * 32}"


def test_the_queue_heads_are_each_tenants_oldest_few_queued_runs(registry: Registry):
    for i in range(8):
        registry.runs.create(id=_id("acme", i), tenant="acme", ask="x", options={}, repo="/a")
    for i in range(3):
        registry.runs.create(id=_id("beta", 20 + i), tenant="beta", ask="x", options={}, repo="/b")
    registry.runs.begin(_id("acme", 0), started=1.0)  # no longer queued
    heads = registry.runs.queued_heads(2)
    assert [r.id for r in heads] == [_id("acme", 1), _id("acme", 2), _id("beta", 20), _id("beta", 21)]
    assert [r.id for r in registry.runs.queued_heads(0)] == [_id("acme", 1), _id("beta", 20)], "one each at least"


def test_racing_submits_never_queue_more_than_the_tenants_cap(registry: Registry):
    registry.runs.create(id=_id("acme", 99), tenant="acme", ask="x", options={}, repo="/a")
    made = together(12, lambda i: registry.runs.create_queued(id=_id("acme", i), tenant="acme", ask="x", options={},
                                                              repo="/a", cap=5))
    assert sum(r is not None for r in made) == 4, "one was queued already: four more fit under a cap of five"
    assert registry.runs.count(statuses=["queued"], tenant="acme") == 5
    other = registry.runs.create_queued(id=_id("beta", 1), tenant="beta", ask="x", options={}, repo="/b", cap=5)
    assert other is not None and other.status == "queued", "the cap is each tenant's own"
    registry.runs.begin(_id("acme", 99), started=1.0)
    assert registry.runs.create_queued(id=_id("acme", 50), tenant="acme", ask="x", options={}, repo="/a", cap=5)
