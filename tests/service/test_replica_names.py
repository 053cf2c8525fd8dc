"""Two live replicas never share a name: ``python -m service`` processes on one host and one PostgreSQL registry,
started under one ``replica`` name. The second refuses to start with a sentence naming the setting; a graceful stop
frees the name at once; a holder on this host that was SIGKILLed is known to be gone, and its name is taken at once;
a holder that is alive but renews nothing (SIGSTOP: a pause, a cut network) keeps its name until its heartbeat ran
out, then a new process takes it, and the old one, woken, says it lost its name and lets the new one be."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import psycopg
import pytest

from _service_helpers import Deployment, Service, wait_for

pytestmark = pytest.mark.cli

LEASE_S = 20.0  # the heartbeat's life: longer than a refused process takes to start and claim the name
NAMED = {"FLOWER_SERVICE_REPLICA": "r1"}


def _refused(svc: Service) -> str:
    """``svc`` exits before it serves, not 0; what it said."""
    with pytest.raises(AssertionError, match="the service exited"):
        svc.start(timeout=180)
    assert svc.proc is not None and svc.proc.returncode not in (None, 0)
    return svc.log_path.read_text()


def _events(svc: Service, event: str) -> list[dict[str, object]]:
    return [line for line in svc.lines() if line.get("event") == event]


def test_a_second_replica_under_a_live_ones_name_refuses_and_the_name_frees_when_its_holder_is_gone(
        tmp_path: Path, services: list[Service], postgres_url: str):
    deployment = Deployment(tmp_path, extra_config=(
        f'database_url = "{postgres_url}"\nlease_s = {LEASE_S}\ngateway_process = "inside"\n'))

    def replica(name: str) -> Service:
        svc = Service(deployment, name, env=NAMED)
        services.append(svc)
        return svc

    def expires() -> float:
        with psycopg.connect(postgres_url) as c:
            row = c.execute("SELECT expires FROM replicas WHERE name = 'r1'").fetchone()
        assert row is not None
        return float(row[0])

    first = replica("first").start(timeout=180)
    said = _refused(replica("second"))
    assert "another live replica holds the name 'r1'" in said and f"(pid {first.proc.pid} on this host)" in said \
        and "with the `replica` setting (FLOWER_SERVICE_REPLICA;" in said, said[-2000:]
    assert first.client().get("/healthz").status_code == 200, "the holder serves on"

    first.stop()  # gracefully: its name is free at once
    third = replica("third").start(timeout=180)
    assert not _events(third, "replica.name_reclaimed"), "it was free"
    third.stop(signal.SIGKILL)  # a crash on this host: its process is gone, which this host can tell at once
    fourth = replica("fourth").start(timeout=180)
    assert _events(fourth, "replica.name_reclaimed")

    assert fourth.proc is not None
    os.killpg(fourth.proc.pid, signal.SIGSTOP)  # alive, renewing nothing: only its heartbeat running out frees it
    try:
        said = _refused(replica("fifth"))
        assert "another live replica holds the name 'r1'" in said, said[-2000:]
        wait_for(lambda: expires() < time.time(), LEASE_S + 30, every=0.5, what="the paused one's heartbeat to run out")
        sixth = replica("sixth").start(timeout=180)
    finally:
        os.killpg(fourth.proc.pid, signal.SIGCONT)
    wait_for(lambda: _events(fourth, "replica.name_taken"), LEASE_S + 30, every=0.5,
             what="the woken replica to say it lost its name")
    assert "follows no run any more" in str(_events(fourth, "replica.name_taken")[0]["error"])
    fourth.stop()  # its graceful stop lets nothing go: the name is the sixth's
    said = _refused(replica("seventh"))
    assert sixth.proc is not None and f"(pid {sixth.proc.pid} on this host)" in said, said[-2000:]
