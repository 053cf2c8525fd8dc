"""The queue's two queries, on SQLite and PostgreSQL: a pass reads each tenant's oldest few queued runs, never the
whole queue; and a tenant's queued runs never pass its cap, however many submits race on however many replicas."""

from __future__ import annotations

from service.registry import Registry

from _tables import together  # noqa: I001


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


def test_replicas_beginning_at_once_never_pass_a_tenants_quota_or_the_machines_slots(postgres_url: str):
    """Each replica counts what runs and begins what fits: counted from its own look, two replicas both saw a free
    slot and both began a run — the flooder held three of four slots on a quota of two, and another tenant's run
    waited behind it for good (tests/service/test_tenant_flood.py, once in CI). Four registries, as four
    replicas, begin twelve of one tenant's runs at once."""
    replicas = [Registry.postgres(postgres_url) for _ in range(4)]
    try:
        for i in range(12):
            replicas[0].runs.create(id=_id("acme", i), tenant="acme", ask="x", options={}, repo="/a")
        replicas[0].runs.create(id=_id("beta", 50), tenant="beta", ask="x", options={}, repo="/b")
        begun = together(12, lambda i: replicas[i % 4].runs.begin(_id("acme", i), started=1.0, quota=2,
                                                                    max_running=3))
        assert sum(r is not None for r in begun) == 2, "the tenant's quota of two holds across replicas"
        assert replicas[1].runs.begin(_id("beta", 50), started=1.0, quota=2, max_running=3) is not None
        more = together(10, lambda i: replicas[i % 4].runs.begin(_id("acme", i + 2), started=1.0, quota=5,
                                                                  max_running=3))
        assert sum(r is not None for r in more) == 0, "three run: the machine's slots are full"
        assert replicas[2].runs.count(statuses=["starting", "running"]) == 3
    finally:
        for reg in replicas:
            reg.close()


def test_a_lost_run_waits_out_its_backoff_before_it_is_a_head_again(registry: Registry):
    from service.registry import Loss

    registry.runs.create(id=_id("acme", 1), tenant="acme", ask="x", options={}, repo="/a")
    registry.runs.begin(_id("acme", 1), started=1.0)
    registry.runs.record_running(_id("acme", 1), "h")
    loss = Loss(cause="crashed", at=5.0, error="exited with code 137", step="工作", place="Bash")
    back = registry.runs.lost(_id("acme", 1), [loss], not_before=100.0, sandboxes=0)
    assert back is not None and (back.status, back.losses, back.handle) == ("queued", [loss], None)
    assert back.sandboxes == 1, "a row an older service wrote counts no sandbox: the one it lost is counted"
    assert registry.runs.queued_heads(1, now=99.0) == []
    assert [r.id for r in registry.runs.queued_heads(1, now=100.0)] == [_id("acme", 1)]
    again = registry.runs.get(_id("acme", 1))
    assert again is not None and again.losses == [loss] and again.started == 1.0
