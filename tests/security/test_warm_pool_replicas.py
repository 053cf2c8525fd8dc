"""Two replicas on one PostgreSQL registry, each with its warm pool on the shared runs folder: the one SIGKILLed
leaves its waiting sandboxes behind, and the live one removes them once the dead one's pool lease ran out — no
replica of the dead one's name has to start again. The live one's own waiting sandboxes stay."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from _hostile import hostile_deployment
from _service_helpers import Service, wait_for
from flower.testing import ScriptedModel
from test_warm_pool import waiting

pytestmark = pytest.mark.cli

LEASE_S = 2.0


def test_a_killed_replicas_waiting_sandboxes_are_reaped_by_a_live_one(tmp_path: Path, services: list[Service],
                                                                     postgres_url: str) -> None:
    dep = hostile_deployment(tmp_path / "dep", "local")
    dep.config.write_text(dep.config.read_text() + f'warm = 1\ndatabase_url = "{postgres_url}"\nlease_s = {LEASE_S}\n')
    runs = (dep.data / "runs").resolve()
    with ScriptedModel([]) as model:
        values = {k: v for k, v in model.env.items() if k != "CLAUDE_CONFIG_DIR"}
        for path in dep.creds.values():
            path.write_text("".join(f"{k}={v}\n" for k, v in values.items()))
        doomed = Service(dep, "doomed", env={"FLOWER_SERVICE_REPLICA": "doomed"}).start(timeout=120)
        services.append(doomed)
        wait_for(lambda: len(waiting(runs, "local")) == 2, timeout=120, what="the doomed replica's pool")
        theirs = set(waiting(runs, "local"))
        live = Service(dep, "live", env={"FLOWER_SERVICE_REPLICA": "live"}).start(timeout=120)
        services.append(live)
        mine = wait_for(lambda: (lambda w: set(w) - theirs if len(w) == 4 else None)(waiting(runs, "local")),
                        timeout=120, what="the live replica's pool beside it")
        doomed.stop(signal.SIGKILL)  # a crash: its waiting sandboxes are left running
        assert theirs <= set(waiting(runs, "local")), "nothing reaps a pool whose lease has not run out"
        wait_for(lambda: set(waiting(runs, "local")) == mine, timeout=90, every=0.5,
                 what="the dead replica's waiting sandboxes removed, the live one's kept")
        reaped = wait_for(lambda: [x for x in live.lines(since_start=True) if x.get("event") == "warm.reaped"],
                          timeout=30, what="the reap logged")
    assert reaped and reaped[0]["sandboxes"] == 2, reaped
    assert not [p for p in theirs if p.exists()], "their slot folders go with them"
