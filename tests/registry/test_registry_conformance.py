"""The registry behaves the same on SQLite and on PostgreSQL: every public method, against real databases (a file
in tmp_path; a fresh PostgreSQL database per test, ``tests/_postgres.py``), races included."""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.exc import IntegrityError

from service.registry import Kept, Delivery, Push, Registry, Standing

ACME = [f"20260101-00000{i}-" + f"{i:x}" * 32 for i in range(6)]


@pytest.fixture(params=["sqlite", "postgres"])
def registry(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Registry]:
    if request.param == "sqlite":
        reg = Registry(tmp_path / "data" / "registry.sqlite3")
    else:
        reg = Registry.postgres(request.getfixturevalue("postgres_url"))
    yield reg
    reg.close()


def _together(n: int, work: Callable[[int], object]) -> list[object]:
    """``work(i)`` in ``n`` threads released at once; what each returned, in order."""
    start, results = threading.Barrier(n), [None] * n
    errors: list[BaseException] = []

    def one(i: int) -> None:
        start.wait()
        try:
            results[i] = work(i)  # type: ignore[call-overload]
        except BaseException as e:  # noqa: BLE001  (reported below)
            errors.append(e)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors
    return results


def test_a_created_run_reads_back_whole_and_only_for_its_tenant(registry: Registry):
    run = registry.create(id=ACME[0], tenant="acme", ask="做一个 hello", options={"rounds": 2}, repo="/r")
    assert (run.status, run.options, run.repo, run.cost_usd, run.cancel_requested) == \
        ("queued", {"rounds": 2}, "/r", 0.0, False)
    assert registry.get(ACME[0]) == run and registry.get(ACME[0], tenant="acme") == run
    assert registry.get(ACME[0], tenant="beta") is None and registry.get("nope") is None


def test_list_filters_and_orders_by_creation(registry: Registry):
    for i, tenant in enumerate(["acme", "beta", "acme", "acme"]):
        registry.create(id=ACME[i], tenant=tenant, ask="a", options={}, repo="")
        time.sleep(0.002)
    registry.update(ACME[2], status="succeeded", ended=100.0)
    registry.update(ACME[3], status="failed", ended=300.0, deleted=301.0)
    assert [r.id for r in registry.list()] == [ACME[3], ACME[2], ACME[1], ACME[0]], "newest first"
    assert [r.id for r in registry.list(oldest_first=True, limit=2)] == [ACME[0], ACME[1]]
    assert [r.id for r in registry.list(tenant="acme", statuses=["queued", "succeeded"])] == [ACME[2], ACME[0]]
    assert registry.list(statuses=[]) == []
    assert [r.id for r in registry.list(deleted=True)] == [ACME[3]]
    assert [r.id for r in registry.list(deleted=False, tenant="acme")] == [ACME[2], ACME[0]]
    assert [r.id for r in registry.list(ended_before=200.0)] == [ACME[2]]


def test_a_guarded_transition_raced_by_two_threads_is_won_exactly_once(registry: Registry):
    for run_id in ACME[:4]:
        registry.create(id=run_id, tenant="acme", ask="a", options={}, repo="")
        won = _together(2, lambda i, r=run_id: registry.transition(r, "starting", frm=["queued"], started=float(i)))
        assert sorted(won) == [False, True], won  # type: ignore[type-var]
        assert registry.get(run_id).status == "starting"  # type: ignore[union-attr]
    with pytest.raises(ValueError):
        registry.transition(ACME[0], "exploded", frm=["starting"])


def test_update_sets_fields_and_refuses_an_unknown_one(registry: Registry):
    registry.create(id=ACME[0], tenant="acme", ask="a", options={}, repo="")
    push = Push(state="pending", url="https://git.example/acme.git", ref="flower/x", commit="abc")
    assert registry.update(ACME[0], event_offset=2**40, diffstat={"files": []}, cancel_requested=True, push=push)
    run = registry.get(ACME[0])
    assert run is not None and (run.event_offset, run.diffstat, run.cancel_requested, run.push) == \
        (2**40, {"files": []}, True, push)
    assert not registry.update(ACME[0], only_if=["running"], step="x"), "the guard holds"
    assert not registry.update("absent", step="x")
    with pytest.raises(KeyError):
        registry.update(ACME[0], owner="beta")


def test_usage_added_by_twenty_threads_at_once_sums_exactly(registry: Registry):
    registry.create(id=ACME[0], tenant="acme", ask="a", options={}, repo="")

    def ten(_: int) -> None:
        for _ in range(10):
            registry.add_usage(ACME[0], "acme", "2026-01-01", input_tokens=3, output_tokens=5, cache_write_tokens=7,
                               cache_read_tokens=11, cost_usd=0.25)

    _together(20, ten)
    run = registry.get(ACME[0])
    assert run is not None
    assert (run.input_tokens, run.output_tokens, run.cache_write_tokens, run.cache_read_tokens, run.cost_usd) == \
        (600, 1000, 1400, 2200, 50.0)
    assert registry.spent("acme", "2026-01-01") == {"cost_usd": 50.0, "input_tokens": 600, "output_tokens": 1000}
    assert registry.spent("acme", "2026-01-02") == {"cost_usd": 0.0, "input_tokens": 0, "output_tokens": 0}
    assert registry.spent("beta", "2026-01-01")["cost_usd"] == 0.0


def _hold(registry: Registry, hold_id: str, owner: str, **over: Any) -> Standing:
    args: dict[str, Any] = dict(run_id=ACME[0], tenant="acme", day="2026-01-01", amount=0.5, now=100.0, ttl=60,
                                run_cap=1.0, day_cap=None)
    standing = registry.hold(hold_id, owner=owner, **{**args, **over})
    assert standing is not None
    return standing


def test_forty_holds_at_once_take_no_more_than_the_caps_leave_room_for(registry: Registry):
    for run_id in ACME[:2]:
        registry.create(id=run_id, tenant="acme", ask="a", options={}, repo="")
    standings = [s for s in _together(40, lambda i: _hold(  # $0.125 each: exact in binary, so are the sums
        registry, f"h{i}", "gw-a" if i % 2 else "gw-b", run_id=ACME[i % 2], amount=0.125, run_cap=0.5,
        day_cap=0.75)) if isinstance(s, Standing)]
    assert len(standings) == 40
    assert sum(s.taken for s in standings) == 6, "the day's $0.75 holds six calls, whichever run and gateway"
    assert all(sum(s.taken for s in standings[r::2]) <= 4 for r in (0, 1)), "a run's $0.50 holds four"
    refused = next(s for s in standings if not s.taken)
    assert refused.day_spent == 0.0 and refused.day_held >= 0.5


def test_a_settled_hold_becomes_spend_and_a_dead_gateways_holds_go(registry: Registry):
    registry.create(id=ACME[0], tenant="acme", ask="a", options={}, repo="")
    assert _hold(registry, "h1", "gw-a").taken and _hold(registry, "h2", "gw-b").taken
    third = _hold(registry, "h3", "gw-b")
    assert not third.taken and (third.run_spent, third.run_held) == (0.0, 1.0)
    spent = registry.add_usage(ACME[0], "acme", "2026-01-01", input_tokens=1, output_tokens=2, cache_write_tokens=0,
                               cache_read_tokens=0, cost_usd=0.25, hold="h1")
    assert (spent.run, spent.day) == (0.25, 0.25)
    crossing = _hold(registry, "h4x", "gw-a")
    assert not crossing.taken, "$0.25 spent, $0.50 held: a call that may cost $0.50 would pass the $1.00"
    again = _hold(registry, "h4", "gw-a", amount=0.25)
    assert again.taken and (again.run_spent, again.run_held) == (0.25, 0.5), "one that may cost $0.25 fits exactly"
    assert registry.release_holds("gw-b") == 1, "gw-b started again: its call in flight holds nothing more"
    registry.release_hold("h4")
    later = _hold(registry, "h5", "gw-a", now=1000.0)
    assert later.taken and later.run_held == 0.0
    assert registry.renew_holds("gw-a", now=1050.0, ttl=60) == 1, "h5's call is still in flight: kept to 1110"
    kept = _hold(registry, "h6", "gw-a", now=1061.0, run_cap=0.75)
    assert not kept.taken and kept.run_held == 0.5
    assert _hold(registry, "h7", "gw-a", now=1111.0).run_held == 0.0, "h5, never settled, ran out at its ttl"
    assert registry.hold("h8", owner="gw-a", run_id="absent", tenant="acme", day="2026-01-01", amount=0.5, now=1.0,
                         ttl=60, run_cap=1.0, day_cap=None) is None


def test_twenty_stream_opens_at_once_take_the_cap_and_a_restarted_replica_lets_its_own_go(registry: Registry):
    slots = _together(20, lambda i: registry.take_stream("acme", f"r{i % 2} s{i}", replica=f"r{i % 2}", cap=4,
                                                          now=100.0, ttl=10))
    taken = [s for s in slots if s is not None]
    assert sorted(taken) == [0, 1, 2, 3], "four slots, each once, whichever replica asked"  # type: ignore[type-var]
    assert registry.take_stream("beta", "r0 x", replica="r0", cap=4, now=100.0, ttl=10) == 0, "a cap per tenant"
    theirs = {s for i, s in enumerate(slots) if s is not None and i % 2 == 1}
    assert registry.release_streams("r0") == 4 - len(theirs) + 1, "r0 started again: its slots (beta's too) go"
    free = sorted(set(range(4)) - theirs)
    assert registry.take_stream("acme", "r0 y", replica="r0", cap=4, now=100.0, ttl=10) == (free[0] if free else None)
    assert registry.take_stream("acme", "r2 z", replica="r2", cap=4, now=111.0, ttl=10) is not None, "ran out"


def test_a_delivery_is_added_once_and_its_tries_are_kept(registry: Registry):
    d = Delivery(id="d1", tenant="acme", run=ACME[0], event="run.finished", body=b"\x00{\"a\": 1}\xff",
                 created=10.0, next_try=10.0)
    registry.create(id=ACME[0], tenant="acme", ask="a", options={}, repo="")
    assert registry.add_delivery(d) and not registry.add_delivery(d), "an event read twice is sent once"
    registry.add_delivery(Delivery(id="d2", tenant="acme", run=ACME[0], event="run.started", body=b"{}", created=11.0))
    assert registry.claim_delivery(d, now=10.0, until=40.0)
    d.state, d.attempts, d.last_status, d.last_error, d.ended, d.next_try = "delivered", 1, 204, None, 12.0, None
    assert registry.delivery_tried(d, claim=40.0)
    assert [x.id for x in registry.deliveries(oldest_first=True)] == ["d1", "d2"]
    assert [x.id for x in registry.deliveries()] == ["d2", "d1"]
    assert registry.deliveries(state="delivered") == [d] and registry.deliveries(tenant="beta") == []
    assert [x.id for x in registry.deliveries(state="pending", limit=5)] == ["d2"]


def test_pending_pushes_are_the_runs_whose_push_was_under_way(registry: Registry):
    for i in range(3):
        registry.create(id=ACME[i], tenant="acme", ask="a", options={}, repo="")
    base = dict(url="https://git.example/a.git", ref="flower/x", commit="abc")
    registry.update(ACME[0], push=Push(state="pushed", **base))
    registry.update(ACME[1], push=Push(state="pending", **base))
    assert [r.id for r in registry.pending_pushes()] == [ACME[1]]


def test_counts_and_count_by_tenant_and_status(registry: Registry):
    for i, (tenant, status) in enumerate([("acme", "queued"), ("acme", "queued"), ("acme", "running"),
                                          ("beta", "queued")]):
        registry.create(id=ACME[i], tenant=tenant, ask="a", options={}, repo="")
        registry.update(ACME[i], status=status)
    assert registry.counts() == {("acme", "queued"): 2, ("acme", "running"): 1, ("beta", "queued"): 1}
    assert registry.count(statuses=["queued"]) == 3 and registry.count(statuses=["queued"], tenant="acme") == 2
    assert registry.count(statuses=[]) == 0


def test_one_folder_is_named_by_one_run_only(registry: Registry):
    registry.create(id=ACME[0], tenant="acme", ask="a", options={}, repo="")
    registry.create(id=ACME[1], tenant="acme", ask="a", options={}, repo="")
    registry.update(ACME[0], folder="warm-00ff")
    with pytest.raises(IntegrityError):
        registry.update(ACME[1], folder="warm-00ff")
    assert registry.folders() == {"warm-00ff"} and registry.get(ACME[1]).folder is None  # type: ignore[union-attr]


def test_ids_starting_resolves_a_prefix_within_one_tenant(registry: Registry):
    registry.create(id=ACME[1], tenant="acme", ask="a", options={}, repo="")
    registry.create(id=ACME[2], tenant="beta", ask="a", options={}, repo="")
    registry.create(id=ACME[3], tenant="acme", ask="a", options={}, repo="")
    assert registry.ids_starting("20260101-00000", tenant="acme") == [ACME[1], ACME[3]]
    assert registry.ids_starting("20260101-00000", tenant="acme", limit=1) == [ACME[1]]
    assert registry.ids_starting(ACME[2][:20], tenant="acme") == [], "never another tenant's"
    assert registry.ids_starting("20260101_", tenant="acme") == [], "a prefix is matched byte for byte"
    assert registry.ids_starting("20260101-000001-1", tenant="acme") == [ACME[1]]


def test_named_writes_return_the_row_they_left_or_none_when_the_guard_fails(registry: Registry):
    registry.create(id=ACME[0], tenant="acme", ask="a", options={}, repo="")
    assert registry.record_start(ACME[0], branch="flower/x", base="abc") is None, "only a starting run"
    assert registry.transition(ACME[0], "starting", frm=["queued"])
    started = registry.record_start(ACME[0], branch="flower/x", base="abc", folder="warm-0a", token_sha256="f" * 64)
    assert started is not None and (started.branch, started.base, started.folder, started.token_sha256) == \
        ("flower/x", "abc", "warm-0a", "f" * 64)
    moved = registry.record_progress(ACME[0], event_offset=2**33, event_seq=7, claimed_cost_usd=0.5, step="写测试")
    assert moved is not None and (moved.event_offset, moved.event_seq, moved.claimed_cost_usd, moved.step) == \
        (2**33, 7, 0.5, "写测试")
    assert registry.record_commit(ACME[0], "c0ffee") is not None
    ends = _together(2, lambda i: registry.finish(ACME[0], "succeeded", ended=100.0 + i, kept=Kept(
        commit_sha="c0ffee", branch="flower/x", diffstat={"files": []}, claimed_cost_usd=0.5, disk_bytes=10)))
    done = [r for r in ends if r is not None]
    assert len(done) == 1, "a run is finished once"
    assert done[0] == registry.get(ACME[0]) and done[0].status == "succeeded"  # type: ignore[union-attr]
    assert done[0].token_sha256 is None and done[0].disk_bytes == 10  # type: ignore[union-attr]
    assert registry.record_progress(ACME[0], event_offset=1, event_seq=1, claimed_cost_usd=0, step=None) is None
    assert registry.record_commit(ACME[0], "other") is None and registry.get(ACME[0]).commit_sha == "c0ffee"  # type: ignore[union-attr]


def test_a_queued_run_is_begun_once_and_a_requeued_one_keeps_nothing_of_its_preparation(registry: Registry):
    registry.create(id=ACME[0], tenant="acme", ask="a", options={}, repo="")
    begun = [r for r in _together(4, lambda i: registry.begin(ACME[0], started=10.0 + i)) if r is not None]
    assert len(begun) == 1 and begun[0].status == "starting", "two schedulers never both start one run"
    assert registry.record_start(ACME[0], branch="flower/x", base="abc", folder="warm-0b", token_sha256="e" * 64)
    back = registry.requeue(ACME[0])
    assert back is not None and (back.status, back.started, back.branch, back.base, back.folder) == \
        ("queued", None, None, None, None)
    assert registry.record_running(ACME[0], "h") is None, "only a starting run starts running"
    assert registry.begin(ACME[0], started=20.0) is not None
    running = registry.record_running(ACME[0], "local:123")
    assert running is not None and (running.status, running.handle) == ("running", "local:123")
    assert registry.requeue(ACME[0]) is None, "a running run is never put back in line"


def test_a_run_finished_without_what_was_collected_keeps_its_branch(registry: Registry):
    registry.create(id=ACME[0], tenant="acme", ask="a", options={}, repo="")
    assert registry.begin(ACME[0], started=1.0)
    assert registry.record_start(ACME[0], branch="flower/y", base="abc", token_sha256="d" * 64)
    assert registry.record_commit(ACME[0], "c0ffee")
    done = registry.finish(ACME[0], "failed", ended=2.0, error="could not start the run: 没有")
    assert done is not None and (done.status, done.error, done.branch, done.commit_sha, done.token_sha256) == \
        ("failed", "could not start the run: 没有", "flower/y", "c0ffee", None)
    assert registry.finish(ACME[0], "killed", ended=3.0) is None, "a run ends once"


def test_a_cancel_ends_a_queued_run_now_and_marks_a_live_one(registry: Registry):
    for i in range(3):
        registry.create(id=ACME[i], tenant="acme", ask="a", options={}, repo="")
    queued = registry.cancel(ACME[0], at=5.0)
    assert queued is not None and (queued.status, queued.ended, queued.cancel_requested) == ("cancelled", 5.0, True)
    assert registry.begin(ACME[1], started=1.0)
    live = registry.cancel(ACME[1], at=6.0)
    assert live is not None and (live.status, live.ended, live.cancel_requested) == ("starting", None, True)
    assert registry.finish(ACME[2], "cancelled", ended=7.0, frm=["queued"])
    assert registry.cancel(ACME[2], at=8.0) is None, "an ended run is left as it ended"


def test_a_live_run_is_held_by_one_replica_and_taken_over_only_once_its_lease_expired(registry: Registry):
    registry.create(id=ACME[0], tenant="acme", ask="a", options={}, repo="")
    assert registry.begin(ACME[0], started=1.0)
    assert registry.unheld(now=1.0) == (ACME[0],), "begun, not yet held"
    takes = [r for r in _together(3, lambda i: registry.take(ACME[0], f"replica-{i}", ttl=10, now=1.0)) if r]
    assert len(takes) == 1 and takes[0].generation == 1, "one replica holds a run"
    a = takes[0]
    b_name = "replica-1" if a.owner != "replica-1" else "replica-2"
    assert registry.take(ACME[0], b_name, ttl=10, now=5.0) is None, "held until it expires"
    assert registry.unheld(now=5.0) == ()
    assert set(registry.renew(a.owner, ttl=10, now=8.0)) == {ACME[0]}
    assert registry.take(ACME[0], b_name, ttl=10, now=15.0) is None, "renewed: held on"
    b = registry.take(ACME[0], b_name, ttl=10, now=19.0)
    assert b is not None and (b.owner, b.generation) == (b_name, 2)
    assert registry.renew(a.owner, ttl=10, now=19.5) == {}, "the old holder learns it lost the run"


def test_a_replica_that_lost_its_lease_writes_nothing_more_of_the_run(registry: Registry):
    """Fencing: a replica paused past its lease wakes up and writes with the token it took — every write fails."""
    registry.create(id=ACME[0], tenant="acme", ask="a", options={}, repo="")
    assert registry.begin(ACME[0], started=1.0)
    old = registry.take(ACME[0], "paused", ttl=10, now=1.0)
    assert old is not None and registry.record_running(ACME[0], "local:1", lease=old) is not None
    new = registry.take(ACME[0], "other", ttl=10, now=12.0)
    assert new is not None and new.generation == old.generation + 1
    assert registry.record_progress(ACME[0], event_offset=9, event_seq=9, claimed_cost_usd=1.0, step="x",
                                    lease=old) is None
    assert registry.record_commit(ACME[0], "deadbeef", lease=old) is None
    assert registry.finish(ACME[0], "failed", ended=13.0, error="stale", lease=old) is None
    row = registry.get(ACME[0])
    assert row is not None and (row.status, row.event_seq, row.commit_sha) == ("running", 0, None)
    registry.release(old)  # the stale holder's release leaves the new lease alone
    assert registry.record_progress(ACME[0], event_offset=3, event_seq=3, claimed_cost_usd=0.0, step=None,
                                    lease=new) is not None
    same = registry.take(ACME[0], "other", ttl=10, now=13.0)  # the same replica, started again under its name
    assert same is not None and same.generation == new.generation + 1
    assert registry.record_commit(ACME[0], "c0ffee", lease=new) is None, "its previous incarnation is fenced too"
    done = registry.finish(ACME[0], "succeeded", ended=14.0, lease=same)
    assert done is not None and done.status == "succeeded"
    registry.release(same)
    assert registry.unheld(now=14.0) == ()


def test_a_replica_listening_is_woken_when_another_queues_or_ends_a_run(registry: Registry, tmp_path: Path):
    """PostgreSQL: LISTEN/NOTIFY — no replica waits for its next poll. SQLite: one replica, nothing to hear."""
    woken = threading.Event()
    stop = registry.listen(woken.set)
    try:
        if registry.dialect != "postgresql":
            registry.create(id=ACME[0], tenant="acme", ask="a", options={}, repo="")
            assert not woken.wait(0.5)
            return
        assert woken.wait(5), "told once listening (what came before it was not heard)"
        woken.clear()
        other = Registry.postgres(str(registry._engine.url.render_as_string(hide_password=False)))
        try:
            other.create(id=ACME[0], tenant="acme", ask="a", options={}, repo="")
            assert woken.wait(5), "a run queued by another replica"
            woken.clear()
            assert other.begin(ACME[0], started=1.0)
            assert woken.wait(5), "a run begun by another replica (a slot taken)"
            woken.clear()
            assert other.record_progress(ACME[0], event_offset=1, event_seq=1, claimed_cost_usd=0, step=None)
            assert not woken.wait(1), "progress changes no status: nobody is woken for it"
            assert other.cancel(ACME[0], at=1.0)
            assert woken.wait(5), "a run cancelled by another replica"
        finally:
            other.close()
    finally:
        stop()


def test_a_lease_that_ran_out_unrenewed_is_still_its_holders_until_another_takes_it(registry: Registry):
    """Renewals failed for a while (a full disk): no one took the run meanwhile, so the next renewal keeps it —
    same generation; once another replica has taken it, it is not renewed."""
    registry.create(id=ACME[0], tenant="acme", ask="a", options={}, repo="")
    assert registry.begin(ACME[0], started=1.0)
    lease = registry.take(ACME[0], "a", ttl=5, now=1.0)
    assert lease is not None and registry.unheld(now=20.0) == (ACME[0],)
    kept = registry.renew("a", ttl=5, now=20.0)
    assert ACME[0] in kept and kept[ACME[0]].generation == lease.generation and kept[ACME[0]].expires == 25.0
    assert registry.take(ACME[0], "b", ttl=5, now=31.0) is not None
    assert registry.renew("a", ttl=5, now=31.5) == {}


def test_booting_counts_the_live_runs_started_since_that_have_sent_no_model_request(registry: Registry):
    """What a warm pool's refill yields to: runs whose sandboxes are starting (``service/warm.py``)."""
    for run_id in ACME[:4]:
        registry.create(id=run_id, tenant="acme", ask="x", options={}, repo="/r")
    assert registry.booting(since=0.0) == 0, "queued runs are not starting"
    registry.begin(ACME[0], started=100.0)
    registry.begin(ACME[1], started=100.0)
    registry.begin(ACME[2], started=10.0)  # started long ago and still silent: stuck, not starting
    assert registry.booting(since=50.0) == 2
    registry.record_first_request(ACME[0], 101.0)
    assert registry.booting(since=50.0) == 1
    registry.record_wire_audit(ACME[1], Counter())  # counts, but no request yet
    assert registry.booting(since=50.0) == 1
    assert registry.transition(ACME[1], "failed", frm=["starting", "running"])
    assert registry.booting(since=50.0) == 0 and registry.booting(since=0.0) == 1
