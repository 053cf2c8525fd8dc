"""Run leases (``LeasesTable``) and the writes they fence (``RunsTable.under``): a live run is held by one replica,
taken over only once its lease ran out, and a replica that lost it writes nothing more of the run."""

from __future__ import annotations

import pytest

from service.registry import Registry

from _tables import ACME, together


def test_a_live_run_is_held_by_one_replica_and_taken_over_only_once_its_lease_expired(registry: Registry):
    registry.runs.create(id=ACME[0], tenant="acme", ask="a", options={}, repo="")
    assert registry.runs.begin(ACME[0], started=1.0)
    assert registry.leases.unheld(now=1.0) == (ACME[0],), "begun, not yet held"
    takes = [r for r in together(3, lambda i: registry.leases.take(ACME[0], f"replica-{i}", ttl=10, now=1.0)) if r]
    assert len(takes) == 1 and takes[0].generation == 1, "one replica holds a run"
    a = takes[0]
    b_name = "replica-1" if a.owner != "replica-1" else "replica-2"
    assert registry.leases.take(ACME[0], b_name, ttl=10, now=5.0) is None, "held until it expires"
    assert registry.leases.unheld(now=5.0) == ()
    assert set(registry.leases.renew(a.owner, ttl=10, now=8.0)) == {ACME[0]}
    assert registry.leases.take(ACME[0], b_name, ttl=10, now=15.0) is None, "renewed: held on"
    b = registry.leases.take(ACME[0], b_name, ttl=10, now=19.0)
    assert b is not None and (b.owner, b.generation) == (b_name, 2)
    assert registry.leases.renew(a.owner, ttl=10, now=19.5) == {}, "the old holder learns it lost the run"

def test_a_replica_that_lost_its_lease_writes_nothing_more_of_the_run(registry: Registry):
    """Fencing: a replica paused past its lease wakes up and writes with the token it took — every write fails."""
    registry.runs.create(id=ACME[0], tenant="acme", ask="a", options={}, repo="")
    assert registry.runs.begin(ACME[0], started=1.0)
    old = registry.leases.take(ACME[0], "paused", ttl=10, now=1.0)
    assert old is not None and registry.runs.under(old).record_running(ACME[0], "local:1") is not None
    new = registry.leases.take(ACME[0], "other", ttl=10, now=12.0)
    assert new is not None and new.generation == old.generation + 1
    stale = registry.runs.under(old)
    assert stale.record_progress(ACME[0], event_offset=9, event_seq=9, claimed_cost_usd=1.0, step="x") is None
    assert stale.record_commit(ACME[0], "deadbeef") is None
    assert stale.finish(ACME[0], "failed", ended=13.0, error="stale") is None
    row = registry.runs.get(ACME[0])
    assert row is not None and (row.status, row.event_seq, row.commit_sha) == ("running", 0, None)
    registry.leases.release(old)  # the stale holder's release leaves the new lease alone
    assert registry.runs.under(new).record_progress(ACME[0], event_offset=3, event_seq=3, claimed_cost_usd=0.0,
                                                    step=None) is not None
    same = registry.leases.take(ACME[0], "other", ttl=10, now=13.0)  # the same replica, started again under its name
    assert same is not None and same.generation == new.generation + 1
    assert registry.runs.under(new).record_commit(ACME[0], "c0ffee") is None, "its previous incarnation is fenced too"
    done = registry.runs.under(same).finish(ACME[0], "succeeded", ended=14.0)
    assert done is not None and done.status == "succeeded"
    registry.leases.release(same)
    assert registry.leases.unheld(now=14.0) == ()

def test_a_lease_that_ran_out_unrenewed_is_still_its_holders_until_another_takes_it(registry: Registry):
    """Renewals failed for a while (a full disk): no one took the run meanwhile, so the next renewal keeps it —
    same generation; once another replica has taken it, it is not renewed."""
    registry.runs.create(id=ACME[0], tenant="acme", ask="a", options={}, repo="")
    assert registry.runs.begin(ACME[0], started=1.0)
    lease = registry.leases.take(ACME[0], "a", ttl=5, now=1.0)
    assert lease is not None and registry.leases.unheld(now=20.0) == (ACME[0],)
    kept = registry.leases.renew("a", ttl=5, now=20.0)
    assert ACME[0] in kept and kept[ACME[0]].generation == lease.generation and kept[ACME[0]].expires == 25.0
    assert registry.leases.take(ACME[0], "b", ttl=5, now=31.0) is not None
    assert registry.leases.renew("a", ttl=5, now=31.5) == {}


def test_a_runs_lease_fences_only_that_run(registry: Registry):
    """The handle a lease gives writes its own run: aimed at another run it refuses, and that run keeps its row."""
    for run_id in ACME[:2]:
        registry.runs.create(id=run_id, tenant="acme", ask="a", options={}, repo="")
        assert registry.runs.begin(run_id, started=1.0)
    lease = registry.leases.take(ACME[0], "r1", ttl=10, now=1.0)
    assert lease is not None
    with pytest.raises(ValueError, match=f"lease of run {ACME[0]} does not hold run {ACME[1]}"):
        registry.runs.under(lease).record_running(ACME[1], "local:1")
    assert registry.runs.get(ACME[1]).status == "starting"  # type: ignore[union-attr]
    assert registry.runs.under(lease).record_running(ACME[0], "local:1") is not None
