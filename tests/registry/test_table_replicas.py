"""Replica names in the registry (``replicas``), on SQLite and PostgreSQL (the ``registry`` fixture of the conformance
suite): a name is held by one process (instance) at a time — claimed when free, renewed by its heartbeat, refused to
another while the heartbeat holds, taken once it ran out (the old holder's next heartbeat then fails), given up at
once on a graceful stop, and taken at once over a holder known to be gone."""

from __future__ import annotations

from service.registry import Registry

from _tables import together


def test_a_free_name_is_claimed_and_a_second_process_finds_it_held(registry: Registry):
    mine = registry.replicas.claim("r1", "a", "mark-a", ttl=10, now=1.0)
    assert (mine.name, mine.instance, mine.process, mine.heartbeat, mine.expires) == ("r1", "a", "mark-a", 1.0, 11.0)
    other = registry.replicas.claim("r1", "b", "mark-b", ttl=10, now=2.0)
    assert (other.instance, other.process, other.expires) == ("a", "mark-a", 11.0), "refused: the holder is said"
    assert registry.replicas.claim("r1", "a", "mark-a", ttl=10, now=3.0).expires == 13.0, "its own again: renewed"
    assert registry.replicas.claim("r2", "b", "mark-b", ttl=10, now=3.0).instance == "b", "another name is free"


def test_a_heartbeat_keeps_the_name_and_a_steal_is_refused_until_it_ran_out(registry: Registry):
    registry.replicas.claim("r1", "a", "", ttl=10, now=1.0)
    assert registry.replicas.beat("r1", "a", ttl=10, now=9.0)
    assert registry.replicas.claim("r1", "b", "", ttl=10, now=15.0).instance == "a", "renewed at 9: held until 19"
    assert not registry.replicas.beat("r1", "b", ttl=10, now=15.0), "a heartbeat is only the holder's"
    taken = registry.replicas.claim("r1", "b", "", ttl=10, now=19.5)
    assert (taken.instance, taken.expires) == ("b", 29.5), "ran out unrenewed: another process takes the name"
    assert not registry.replicas.beat("r1", "a", ttl=10, now=20.0), "the old holder, waking, learns it lost its name"
    assert registry.replicas.claim("r1", "a", "", ttl=10, now=20.0).instance == "b"


def test_a_graceful_stop_frees_the_name_at_once_and_only_its_holders_stop_does(registry: Registry):
    registry.replicas.claim("r1", "a", "", ttl=10, now=1.0)
    registry.replicas.release("r1", "b")  # a process that never held it lets nothing go
    assert registry.replicas.claim("r1", "c", "", ttl=10, now=2.0).instance == "a"
    registry.replicas.release("r1", "a")
    assert registry.replicas.claim("r1", "c", "", ttl=10, now=2.0).instance == "c", "free at once"
    assert not registry.replicas.beat("r1", "a", ttl=10, now=3.0)


def test_a_holder_known_to_be_gone_is_taken_over_at_once_and_only_that_one(registry: Registry):
    registry.replicas.claim("r1", "dead", "", ttl=10, now=1.0)
    assert registry.replicas.claim("r1", "b", "", ttl=10, now=2.0, over="someone-else").instance == "dead"
    assert registry.replicas.claim("r1", "b", "", ttl=10, now=2.0, over="dead").instance == "b"
    assert registry.replicas.claim("r1", "c", "", ttl=10, now=3.0, over="dead").instance == "b", "b is not dead"


def test_of_ten_processes_claiming_one_free_name_at_once_one_holds_it(registry: Registry):
    rows = together(10, lambda i: registry.replicas.claim("r1", f"i{i}", "", ttl=10, now=1.0))
    holders = {row.instance for row in rows}  # type: ignore[attr-defined]
    assert len(holders) == 1, rows
    registry.replicas.claim("r1", "late", "", ttl=10, now=12.0)  # ran out: taken by a latecomer, once
    rows = together(10, lambda i: registry.replicas.claim("r1", f"j{i}", "", ttl=10, now=30.0))
    assert len({row.instance for row in rows}) == 1, rows  # type: ignore[attr-defined]
