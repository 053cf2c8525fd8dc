"""A replica's name and its runs' leases (``service.control.leases``), handed the registry on a SQLite file: one live process
per name — a second is refused with the setting named, a graceful stop frees the name at once, a holder on this host
whose process is gone is taken over at once — and a holder that wakes to find its name or a run's lease taken under
its name by another process follows those runs no more (it never adopts the other's fencing token)."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from service.control.backoff import RepeatLog
from service.clock import ManualClock
from service.errors import ReplicaNameTaken
from service.control.leases import Leases, gone, process_mark
from service.control.live import LiveRuns
from service.logging import get_logger
from service.registry import Registry

RUN = "20261205-000000-" + "a" * 32


def _leases(registry: Registry, name: str = "r1", ttl: float = 1.0, live: LiveRuns | None = None) -> Leases:
    return Leases(registry.leases, registry.replicas, name, ttl, live if live is not None else LiveRuns(),
                  RepeatLog(get_logger("flower.test")))


def _holding(registry: Registry) -> tuple[LiveRuns, Leases]:
    """A running run RUN and started leases of replica r1 that hold it."""
    registry.runs.create(id=RUN, tenant="acme", ask="a", options={}, repo="")
    registry.runs.begin(RUN, started=1.0)
    live = LiveRuns()
    leases = _leases(registry, live=live)
    leases.start()
    assert leases.hold(RUN)
    return live, leases


def _until(what: str, done: object) -> None:
    deadline = time.monotonic() + 30
    while not (done() if callable(done) else done):
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


@pytest.fixture
def registry(tmp_path: Path) -> Registry:
    return Registry(tmp_path / "data" / "registry.sqlite3")


def test_a_name_held_by_a_live_process_is_refused_with_the_setting_named_and_freed_by_a_graceful_stop(
        registry: Registry):
    first, second = _leases(registry), _leases(registry)
    first.claim()
    with pytest.raises(ReplicaNameTaken) as refused:
        second.claim()
    said = str(refused.value)
    assert "another live replica holds the name 'r1'" in said and f"(pid {os.getpid()} on this host)" in said
    assert "with the `replica` setting (FLOWER_SERVICE_REPLICA; unset, it is the host's name)" in said, said
    assert refused.value.name == "r1" and 0 < refused.value.expires_in_s <= 1.0
    first.claim()  # its own name: claimed again, not refused
    _leases(registry, "r2").claim()  # another name is another replica's
    first.release()
    second.claim()  # free at once
    with pytest.raises(ReplicaNameTaken):
        first.claim()


def test_a_holder_on_this_host_whose_process_is_gone_is_taken_over_at_once(registry: Registry):
    holder = subprocess.Popen(["sleep", "60"])
    mark = process_mark(holder.pid)
    registry.replicas.claim("r1", "old", mark, ttl=600, now=time.time())
    try:
        with pytest.raises(ReplicaNameTaken):
            _leases(registry).claim()  # alive, however long its heartbeat holds
    finally:
        holder.kill()
        holder.wait()
    leases = _leases(registry)
    leases.claim()  # a kill -9 on this host: known at once, not 600 s later
    assert registry.replicas.claim("r1", "other", "", ttl=1, now=time.time()).instance == leases.instance


def test_gone_is_said_only_of_a_process_of_this_host_and_pid_namespace_that_ended():
    here = process_mark()
    boot, ns, pid, start = here.split()
    assert pid == str(os.getpid()) and not gone(here)
    assert gone(f"{boot} {ns} {pid} {int(start) + 1}"), "its pid, another start time: a reused pid"
    assert not gone(f"another-boot {ns} {pid} {int(start) + 1}") and not gone(f"{boot} pid:[1] {pid} 0")
    assert not gone("") and not gone("not a mark") and not gone(f"{boot} {ns} x 0")
    child = subprocess.Popen(["sleep", "60"])
    mark = process_mark(child.pid)
    assert not gone(mark)
    child.kill()  # not waited for: a zombie until reaped
    _until("the child to be a zombie", lambda: Path(f"/proc/{child.pid}/stat").read_text().split(") ")[1][0] == "Z")
    assert gone(mark)
    child.wait()
    assert gone(mark)


def test_a_lease_taken_again_under_this_name_by_another_process_is_lost_not_adopted(registry: Registry):
    live, leases = _holding(registry)
    try:
        mine = live.of(RUN).lease
        assert mine is not None and not leases.taken(RUN)
        other = registry.leases.take(RUN, "r1", ttl=1.0, now=time.time())  # a second process under the name took it
        assert other is not None and other.generation == mine.generation + 1
        assert leases.taken(RUN), "its token is not this process's"
        _until("a renewal round after the take", lambda: leases._held[0] > time.time() - 0.1 and
               RUN in leases._held[1] and leases._held[1][RUN].generation == other.generation)
        time.sleep(leases.ttl / 4)
        changes = leases.changes()
        assert changes is not None and changes.lost == (RUN,) and live.of(RUN).lease == mine
    finally:
        leases.release()


def test_a_holder_that_wakes_to_find_its_name_taken_follows_no_run_and_frees_nothing(registry: Registry):
    _, paused = _holding(registry)
    # it is paused past its heartbeat: another process claims the name once it ran out
    later = time.time() + 2 * paused.ttl
    assert registry.replicas.claim("r1", "new", "", ttl=60, now=later).instance == "new"
    _until("the woken one to find its name taken", lambda: paused.name_lost is not None)
    assert "follows no run any more" in str(paused.name_lost) and "`replica` setting" in str(paused.name_lost)
    assert paused.taken(RUN) and not paused.hold("20261205-000000-" + "b" * 32)
    time.sleep(paused.ttl / 4)
    changes = paused.changes()
    assert changes is not None and changes.lost == (RUN,) and changes.orphans == ()
    paused.release()  # its graceful stop lets nothing go: the name is the new process's
    assert registry.replicas.claim("r1", "third", "", ttl=1, now=later).instance == "new"


T2031 = 1925078399.0  # 2031-01-01 23:59:59 UTC: a wall time no test runs at, so a part reading time.time() shows


def test_a_lease_runs_out_on_the_clock_it_is_handed_and_only_then_another_replica_takes_the_run(
        registry: Registry):
    """r1 holds the run and stops renewing; on a ``ManualClock`` the lease holds for its whole ttl (10 minutes: no
    test waits for it) and not a moment longer — then r2 sees it unheld and takes it, and r1 learns it was taken."""
    clock = ManualClock(T2031)
    registry.runs.create(id=RUN, tenant="acme", ask="a", options={}, repo="")
    registry.runs.begin(RUN, started=T2031)
    r1_live, r2_live = LiveRuns(), LiveRuns()
    r1, r2 = (Leases(registry.leases, registry.replicas, name, 600.0, live, RepeatLog(get_logger("flower.test")),
                     clock=clock) for name, live in (("r1", r1_live), ("r2", r2_live)))
    r1.claim()
    r2.claim()
    assert r1.hold(RUN)
    held = r1_live.of(RUN).lease
    assert held is not None and held.expires == T2031 + 600
    clock.advance(599)
    assert not r2.hold(RUN), "r1's lease holds for its whole ttl"
    clock.advance(2)
    changes = r2.changes()
    assert changes is not None and changes.orphans == (RUN,), "run out: no replica holds it"
    assert r2.hold(RUN) and r1.taken(RUN)
