"""The runs table (``RunsTable``): a run reads back whole and only for its tenant, lists and counts filter as asked,
every named write is guarded by the run's status and returns the row it left (or None), and two writers racing one
transition never both win."""

from __future__ import annotations

import time

import pytest
from sqlalchemy.exc import IntegrityError

from service.registry import Kept, Push, Registry

from _tables import ACME, together


def test_a_created_run_reads_back_whole_and_only_for_its_tenant(registry: Registry):
    run = registry.runs.create(id=ACME[0], tenant="acme", ask="做一个 hello", options={"rounds": 2}, repo="/r")
    assert (run.status, run.options, run.repo, run.cost_usd, run.cancel_requested) == \
        ("queued", {"rounds": 2}, "/r", 0.0, False)
    assert registry.runs.get(ACME[0]) == run and registry.runs.get(ACME[0], tenant="acme") == run
    assert registry.runs.get(ACME[0], tenant="beta") is None and registry.runs.get("nope") is None

def test_list_filters_and_orders_by_creation(registry: Registry):
    for i, tenant in enumerate(["acme", "beta", "acme", "acme"]):
        registry.runs.create(id=ACME[i], tenant=tenant, ask="a", options={}, repo="")
        time.sleep(0.002)
    registry.runs.update(ACME[2], status="succeeded", ended=100.0)
    registry.runs.update(ACME[3], status="failed", ended=300.0, deleted=301.0)
    assert [r.id for r in registry.runs.list()] == [ACME[3], ACME[2], ACME[1], ACME[0]], "newest first"
    assert [r.id for r in registry.runs.list(oldest_first=True, limit=2)] == [ACME[0], ACME[1]]
    assert [r.id for r in registry.runs.list(tenant="acme", statuses=["queued", "succeeded"])] == [ACME[2], ACME[0]]
    assert registry.runs.list(statuses=[]) == []
    assert [r.id for r in registry.runs.list(deleted=True)] == [ACME[3]]
    assert [r.id for r in registry.runs.list(deleted=False, tenant="acme")] == [ACME[2], ACME[0]]
    assert [r.id for r in registry.runs.list(ended_before=200.0)] == [ACME[2]]

def test_a_guarded_transition_raced_by_two_threads_is_won_exactly_once(registry: Registry):
    for run_id in ACME[:4]:
        registry.runs.create(id=run_id, tenant="acme", ask="a", options={}, repo="")
        won = together(2, lambda i, r=run_id: registry.runs.transition(r, "starting", frm=["queued"], started=float(i)))
        assert sorted(won) == [False, True], won  # type: ignore[type-var]
        assert registry.runs.get(run_id).status == "starting"  # type: ignore[union-attr]
    with pytest.raises(ValueError):
        registry.runs.transition(ACME[0], "exploded", frm=["starting"])

def test_update_sets_fields_and_refuses_an_unknown_one(registry: Registry):
    registry.runs.create(id=ACME[0], tenant="acme", ask="a", options={}, repo="")
    push = Push(state="pending", url="https://git.example/acme.git", ref="flower/x", commit="abc")
    assert registry.runs.update(ACME[0], event_offset=2**40, diffstat={"files": []}, cancel_requested=True, push=push)
    run = registry.runs.get(ACME[0])
    assert run is not None and (run.event_offset, run.diffstat, run.cancel_requested, run.push) == \
        (2**40, {"files": []}, True, push)
    assert not registry.runs.update(ACME[0], only_if=["running"], step="x"), "the guard holds"
    assert not registry.runs.update("absent", step="x")
    with pytest.raises(KeyError):
        registry.runs.update(ACME[0], owner="beta")

def test_pending_pushes_are_the_runs_whose_push_was_under_way(registry: Registry):
    for i in range(3):
        registry.runs.create(id=ACME[i], tenant="acme", ask="a", options={}, repo="")
    base = dict(url="https://git.example/a.git", ref="flower/x", commit="abc")
    registry.runs.update(ACME[0], push=Push(state="pushed", **base))
    registry.runs.update(ACME[1], push=Push(state="pending", **base))
    assert [r.id for r in registry.runs.pending_pushes()] == [ACME[1]]

def test_counts_and_count_by_tenant_and_status(registry: Registry):
    for i, (tenant, status) in enumerate([("acme", "queued"), ("acme", "queued"), ("acme", "running"),
                                          ("beta", "queued")]):
        registry.runs.create(id=ACME[i], tenant=tenant, ask="a", options={}, repo="")
        registry.runs.update(ACME[i], status=status)
    assert registry.runs.counts() == {("acme", "queued"): 2, ("acme", "running"): 1, ("beta", "queued"): 1}
    assert registry.runs.count(statuses=["queued"]) == 3
    assert registry.runs.count(statuses=["queued"], tenant="acme") == 2
    assert registry.runs.count(statuses=[]) == 0

def test_one_folder_is_named_by_one_run_only(registry: Registry):
    registry.runs.create(id=ACME[0], tenant="acme", ask="a", options={}, repo="")
    registry.runs.create(id=ACME[1], tenant="acme", ask="a", options={}, repo="")
    registry.runs.update(ACME[0], folder="warm-00ff")
    with pytest.raises(IntegrityError):
        registry.runs.update(ACME[1], folder="warm-00ff")
    assert registry.runs.folders() == {"warm-00ff"}
    assert registry.runs.get(ACME[1]).folder is None  # type: ignore[union-attr]

def test_ids_starting_resolves_a_prefix_within_one_tenant(registry: Registry):
    registry.runs.create(id=ACME[1], tenant="acme", ask="a", options={}, repo="")
    registry.runs.create(id=ACME[2], tenant="beta", ask="a", options={}, repo="")
    registry.runs.create(id=ACME[3], tenant="acme", ask="a", options={}, repo="")
    assert registry.runs.ids_starting("20260101-00000", tenant="acme") == [ACME[1], ACME[3]]
    assert registry.runs.ids_starting("20260101-00000", tenant="acme", limit=1) == [ACME[1]]
    assert registry.runs.ids_starting(ACME[2][:20], tenant="acme") == [], "never another tenant's"
    assert registry.runs.ids_starting("20260101_", tenant="acme") == [], "a prefix is matched byte for byte"
    assert registry.runs.ids_starting("20260101-000001-1", tenant="acme") == [ACME[1]]


def test_ids_starting_resolves_the_start_of_the_hex_part_as_a_short_id(registry: Registry):
    for run_id, tenant in ((ACME[1], "acme"), (ACME[2], "beta"), (ACME[3], "acme")):
        registry.runs.create(id=run_id, tenant=tenant, ask="a", options={}, repo="")
    assert registry.runs.ids_starting("3333", tenant="acme", hex_part=True) == [ACME[3]]
    assert registry.runs.ids_starting("3333", tenant="acme") == [], "only with hex_part"
    assert registry.runs.ids_starting("2222", tenant="acme", hex_part=True) == [], "never another tenant's"
    assert registry.runs.ids_starting("2026", tenant="acme", hex_part=True) == [ACME[1], ACME[3]], "the id's start too"

def test_named_writes_return_the_row_they_left_or_none_when_the_guard_fails(registry: Registry):
    registry.runs.create(id=ACME[0], tenant="acme", ask="a", options={}, repo="")
    assert registry.runs.record_start(ACME[0], branch="flower/x", base="abc") is None, "only a starting run"
    assert registry.runs.transition(ACME[0], "starting", frm=["queued"])
    started = registry.runs.record_start(ACME[0], branch="flower/x", base="abc", folder="warm-0a",
                                         token_sha256="f" * 64)
    assert started is not None and (started.branch, started.base, started.folder, started.token_sha256) == \
        ("flower/x", "abc", "warm-0a", "f" * 64)
    moved = registry.runs.record_progress(ACME[0], event_offset=2**33, event_seq=7, claimed_cost_usd=0.5,
                                          step="写测试")
    assert moved is not None and (moved.event_offset, moved.event_seq, moved.claimed_cost_usd, moved.step) == \
        (2**33, 7, 0.5, "写测试")
    assert registry.runs.record_commit(ACME[0], "c0ffee") is not None
    ends = together(2, lambda i: registry.runs.finish(ACME[0], "succeeded", ended=100.0 + i, kept=Kept(
        commit_sha="c0ffee", branch="flower/x", diffstat={"files": []}, claimed_cost_usd=0.5, disk_bytes=10)))
    done = [r for r in ends if r is not None]
    assert len(done) == 1, "a run is finished once"
    assert done[0] == registry.runs.get(ACME[0]) and done[0].status == "succeeded"  # type: ignore[union-attr]
    assert done[0].token_sha256 is None and done[0].disk_bytes == 10  # type: ignore[union-attr]
    assert registry.runs.record_progress(ACME[0], event_offset=1, event_seq=1, claimed_cost_usd=0, step=None) is None
    assert registry.runs.record_commit(ACME[0], "other") is None
    assert registry.runs.get(ACME[0]).commit_sha == "c0ffee"  # type: ignore[union-attr]

def test_a_queued_run_is_begun_once_and_a_requeued_one_keeps_nothing_of_its_preparation(registry: Registry):
    registry.runs.create(id=ACME[0], tenant="acme", ask="a", options={}, repo="")
    begun = [r for r in together(4, lambda i: registry.runs.begin(ACME[0], started=10.0 + i)) if r is not None]
    assert len(begun) == 1 and begun[0].status == "starting", "two schedulers never both start one run"
    assert registry.runs.record_start(ACME[0], branch="flower/x", base="abc", folder="warm-0b", token_sha256="e" * 64)
    back = registry.runs.requeue(ACME[0])
    assert back is not None and (back.status, back.started, back.branch, back.base, back.folder) == \
        ("queued", None, None, None, None)
    assert registry.runs.record_running(ACME[0], "h") is None, "only a starting run starts running"
    assert registry.runs.begin(ACME[0], started=20.0) is not None
    running = registry.runs.record_running(ACME[0], "local:123")
    assert running is not None and (running.status, running.handle) == ("running", "local:123")
    assert registry.runs.requeue(ACME[0]) is None, "a running run is never put back in line"

def test_a_run_finished_without_what_was_collected_keeps_its_branch(registry: Registry):
    registry.runs.create(id=ACME[0], tenant="acme", ask="a", options={}, repo="")
    assert registry.runs.begin(ACME[0], started=1.0)
    assert registry.runs.record_start(ACME[0], branch="flower/y", base="abc", token_sha256="d" * 64)
    assert registry.runs.record_commit(ACME[0], "c0ffee")
    done = registry.runs.finish(ACME[0], "failed", ended=2.0, error="could not start the run: 没有")
    assert done is not None and (done.status, done.error, done.branch, done.commit_sha, done.token_sha256) == \
        ("failed", "could not start the run: 没有", "flower/y", "c0ffee", None)
    assert registry.runs.finish(ACME[0], "killed", ended=3.0) is None, "a run ends once"

def test_a_cancel_ends_a_queued_run_now_and_marks_a_live_one(registry: Registry):
    for i in range(3):
        registry.runs.create(id=ACME[i], tenant="acme", ask="a", options={}, repo="")
    queued = registry.runs.cancel(ACME[0], at=5.0)
    assert queued is not None and (queued.status, queued.ended, queued.cancel_requested) == ("cancelled", 5.0, True)
    assert registry.runs.begin(ACME[1], started=1.0)
    live = registry.runs.cancel(ACME[1], at=6.0)
    assert live is not None and (live.status, live.ended, live.cancel_requested) == ("starting", None, True)
    assert registry.runs.finish(ACME[2], "cancelled", ended=7.0, frm=["queued"])
    assert registry.runs.cancel(ACME[2], at=8.0) is None, "an ended run is left as it ended"
