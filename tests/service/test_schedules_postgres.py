"""Schedules on two replicas sharing PostgreSQL, on a clock the test moves: every tick fires exactly once when both
look for due ticks at once, and also when the replica holding a tick is SIGKILLed in the middle of firing it —
before its run was queued, or after it was and before the tick was finished. The killed replica is a real process
(``python -c REPLICA``) stopped where the test holds it: a PostgreSQL lock it waits on."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import psycopg
import pytest

from service.control.schedules import tick_run_id

from _service_helpers import ROOT, wait_for
from test_schedules import HOUR, T0, World, world

pytestmark = pytest.mark.asyncio

REPLICA = """
import asyncio, sys
from service.clock import ManualClock
from service.config import ServiceConfig
from service.control.admission import Admission
from service.control.health import Health
from service.control.schedules import Schedules
from service.registry import Registry
from service.tenants import Tenants

url, tenants, data, now = sys.argv[1:5]
cfg = ServiceConfig(data_dir=data, backend="local", min_free_mb=0, guard_canary=False, tenants=tenants)
registry = Registry.postgres(url)
admission = Admission(cfg, registry.runs, Health(cfg.data_path, 0, "local"), refusal=lambda: None,
                      wake=lambda: None)
replica = Schedules(cfg, registry.schedules, registry.runs, Tenants(tenants), admission, lambda run: None,
                    owner="replica-a", clock=ManualClock(float(now)))
print([f.run for f in asyncio.run(replica.fire_due())], flush=True)
"""


def on_postgres(tmp_path: Path, git_repo: Callable[..., Path], url: str, owner: str) -> World:
    """``world`` (tests/service/test_schedules.py) with its registry on PostgreSQL."""
    from service.registry import Registry

    w = world(tmp_path, git_repo, owner=owner)
    w.registry.close()
    w.registry = Registry.postgres(url)
    w.schedules.table, w.schedules.runs, w.schedules.admission.runs = (w.registry.schedules, w.registry.runs,
                                                                       w.registry.runs)
    return w


async def test_two_replicas_looking_at_once_fire_each_tick_exactly_once(
        tmp_path: Path, git_repo: Callable[..., Path], postgres_url: str) -> None:
    a = on_postgres(tmp_path / "a", git_repo, postgres_url, "replica-a")
    b = on_postgres(tmp_path / "b", git_repo, postgres_url, "replica-b")
    b.clock = a.clock
    b.schedules.clock = a.clock
    made = a.schedules.create(a.tenant, ask="hourly", options={}, cron="0 * * * *", timezone="UTC",
                              budget_usd=None, overlap="skip")
    fired: list[str | None] = []
    for hour in range(6):
        a.clock.advance(HOUR if hour else 31)
        both = await asyncio.gather(a.schedules.fire_due(), b.schedules.fire_due(), a.schedules.fire_due())
        fired += [f.run for found in both for f in found]
        for run in a.registry.runs.list():
            a.cancel(run.id)  # each run ends before the next tick
    ticks = [T0 + 30 + h * HOUR for h in range(6)]
    assert fired == [tick_run_id(made.id, t) for t in ticks], "one fire per tick, by whichever replica held it"
    assert sorted(r.id for r in a.registry.runs.list()) == sorted(tick_run_id(made.id, t) for t in ticks)
    a.registry.close()
    b.registry.close()


@pytest.mark.parametrize("killed", ["before its run was queued", "after its run was queued"])
async def test_a_replica_killed_while_firing_a_tick_leaves_it_to_the_other_which_fires_it_once(
        tmp_path: Path, git_repo: Callable[..., Path], postgres_url: str, killed: str) -> None:
    b = on_postgres(tmp_path, git_repo, postgres_url, "replica-b")
    made = b.schedules.create(b.tenant, ask="hourly", options={}, cron="0 * * * *", timezone="UTC",
                              budget_usd=None, overlap="skip")
    tick = T0 + 30
    b.clock.advance(35)
    run_id = tick_run_id(made.id, tick)
    with psycopg.connect(postgres_url, autocommit=True) as queue_lock, psycopg.connect(postgres_url) as row_lock:
        # the queue's lock (``RunsTable.create_queued`` takes it): replica a stops there, holding the tick
        queue_lock.execute("SELECT pg_advisory_lock(hashtext('flower-queue:acme'))")
        (tmp_path / "data-a").mkdir()
        replica = subprocess.Popen(
            [sys.executable, "-c", REPLICA, postgres_url, str(b.schedules.config.tenants),
             str(tmp_path / "data-a"), str(b.clock.now())],
            cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT), "PGAPPNAME": "replica-a",
                           # the server looks at the client's socket while a statement waits: a dead replica's
                           # waiting write is ended, not carried out (what its TCP keepalive does across hosts)
                           "PGOPTIONS": "-c client_connection_check_interval=100"},
            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            wait_for(lambda: b.registry.schedules.history(made.id), 60, what="replica a to record the tick")
            held = b.registry.schedules.get(made.id)
            assert held is not None and held.holder == "replica-a", held
            if killed == "after its run was queued":
                # the schedule's row: replica a queues the run, then waits here to finish the tick
                row_lock.execute("SELECT id FROM schedules WHERE id = %s FOR UPDATE", (made.id,))
                queue_lock.execute("SELECT pg_advisory_unlock(hashtext('flower-queue:acme'))")
                wait_for(lambda: b.registry.runs.get(run_id), 60, what="replica a to queue the run")
            replica.send_signal(signal.SIGKILL)
            assert replica.wait(30) == -signal.SIGKILL, replica.stderr.read() if replica.stderr else ""
            wait_for(lambda: not queue_lock.execute("SELECT pid FROM pg_stat_activity WHERE application_name = "
                                                    "'replica-a'").fetchall(), 60, what="its connections to end")
        finally:
            if replica.poll() is None:
                replica.kill()
                replica.wait(10)
        row_lock.rollback()
        queue_lock.execute("SELECT pg_advisory_unlock_all()")
    assert (b.registry.runs.get(run_id) is not None) == (killed == "after its run was queued")

    assert await b.schedules.fire_due() == [], "replica a's hold on the tick has not run out yet"
    b.clock.advance(61)  # it has
    [fire] = await b.schedules.fire_due()
    assert (fire.tick, fire.run, fire.outcome) == (tick, run_id, "started")
    assert [r.id for r in b.registry.runs.list()] == [run_id], "the tick's run, once"
    assert [(f.tick, f.run) for f in b.registry.schedules.history(made.id)] == [(tick, run_id)]
    after = b.registry.schedules.get(made.id)
    assert after is not None and (after.next_at, after.holder, after.last_run) == (tick + HOUR, None, run_id)
    b.registry.close()
