"""Item 4: the Docker engine goes away while runs are live, then comes back.

The engine is one this test starts (its own socket, data root, exec root and pid file; no bridge, no iptables:
never the machine's shared dockerd), with ``--live-restore`` as service/README.md tells operators. While it is
down the service says so (``/healthz`` degraded, ``flower_backend_up 0``), marks no live run failed, starts
nothing, and logs the failure once with a count; when it is back the service sees its runs again by itself and
they finish. Fails instead of skipping when FLOWER_REQUIRE_DOCKER=1."""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from _dockerd import OwnDockerd
from _faults import figures, lines_between, need
from _service_helpers import Deployment, Service, run_status, serve, wait_for, wait_question, wait_status
from flower.testing import Rule, ScriptedModel, say, tool
from sandbox.testing import ASK, BRIEF, CLARIFIER

pytestmark = [pytest.mark.docker, pytest.mark.cli]

TERMINAL = ("succeeded", "failed", "aborted", "killed", "cancelled")


@pytest.fixture
def own_dockerd() -> Iterator[OwnDockerd]:
    if shutil.which("dockerd") is None or os.geteuid() != 0:
        need("a dockerd of the test's own needs the dockerd binary and root")
    state = Path(tempfile.mkdtemp(prefix="fd-", dir="/tmp"))  # short: the engine's sockets live under it
    engine = OwnDockerd(state)
    try:
        engine.start()
    except AssertionError as e:
        need(f"our dockerd would not start: {e}")
    yield engine
    if engine.proc is None:
        engine.start()
    engine.remove_containers("flower.run")
    engine.stop()
    shutil.rmtree(state, ignore_errors=True)


def test_the_engine_stops_and_starts_under_live_runs(tmp_path: Path, services: list[Service],
                                                     own_dockerd: OwnDockerd, monkeypatch: pytest.MonkeyPatch):
    image = own_dockerd.ensure_run_image()
    monkeypatch.setenv("DOCKER_HOST", own_dockerd.host)  # the service's docker backend talks to our engine only
    deployment = Deployment(tmp_path, quota=2, max_running=4, backend="docker",
                            extra_config=f'image = "{image}"\nnetwork_mode = "host"\n')
    tags = ["引擎-甲", "引擎-乙", "引擎-等"]
    rules = [r for tag in tags for r in (Rule(tool(ASK, {"question": f"{tag} 用什么语言?"}), system=CLARIFIER, prompt=tag),
                                         Rule(say(BRIEF), system=CLARIFIER, prompt=tag, result="Python"))]
    with ScriptedModel(rules) as model:
        service = serve(deployment, services, model, timeout=180)
        acme, beta, anon = service.client("acme"), service.client("beta"), service.client(None)
        live = [acme.post("/v1/runs", json={"ask": tags[0], "options": {"clarify_only": True}}).json()["id"],
                beta.post("/v1/runs", json={"ask": tags[1], "options": {"clarify_only": True}}).json()["id"]]
        questions = [wait_question(acme, live[0], 180), wait_question(beta, live[1], 180)]
        containers = set(own_dockerd.containers("flower.run"))
        assert len(containers) == 2

        t_down = time.time()
        own_dockerd.stop()  # the fault: the engine goes away (containers live on: live-restore)
        health = wait_for(lambda: (lambda h: h if h["status"] == "degraded" else None)(anon.get("/healthz").json()),
                          60, what="/healthz to report the backend down")
        assert any(r.startswith("backend down") for r in health["reasons"]), health
        assert 'flower_backend_up{backend="docker"} 0' in anon.get("/metrics").text
        waiting = acme.post("/v1/runs", json={"ask": tags[2], "options": {"clarify_only": True}})
        assert waiting.status_code == 201, waiting.text  # accepted: it waits for the engine
        time.sleep(12)  # the fault lasts: what the service does meanwhile is counted
        assert run_status(acme, live[0])["status"] == "running", "a run the service cannot see is not failed"
        assert run_status(beta, live[1])["status"] == "running"
        assert run_status(acme, waiting.json()["id"])["status"] == "queued", "nothing starts on an absent engine"

        t_up = time.time()
        own_dockerd.start()
        wait_for(lambda: anon.get("/healthz").json()["status"] == "ok", 120, what="/healthz ok again")
        t_seen = time.time()
        assert set(own_dockerd.containers("flower.run")) >= containers, "live-restore kept the containers"
        acme.post(f"/v1/runs/{live[0]}/answers", json={"question_id": questions[0]["id"], "text": "Python"})
        beta.post(f"/v1/runs/{live[1]}/answers", json={"question_id": questions[1]["id"], "text": "Python"})
        finals = [wait_status(acme, live[0], TERMINAL, 180), wait_status(beta, live[1], TERMINAL, 180)]
        q3 = wait_question(acme, waiting.json()["id"], 180)
        acme.post(f"/v1/runs/{waiting.json()['id']}/answers", json={"question_id": q3["id"], "text": "Python"})
        finals.append(wait_status(acme, waiting.json()["id"], TERMINAL, 180))
    assert [f["status"] for f in finals] == ["succeeded"] * 3, finals

    during = lines_between(service, t_down, t_up)
    per_event: dict[str, int] = {}
    for x in during:
        if x.get("level") in ("warning", "error"):
            per_event[x["event"]] = per_event.get(x["event"], 0) + 1
    assert all(n <= 3 for n in per_event.values()), per_event
    assert [x for x in service.lines() if x.get("event") == "backend.down"], "the engine going away is logged"
    figures("engine_away", runs_in_flight=2, runs_queued_during=1, runs_lost=sum(f["status"] != "succeeded"
                                                                                  for f in finals),
            down_s=round(t_up - t_down, 1), log_lines=len(during),
            log_lines_per_min=round(len(during) / ((t_up - t_down) / 60), 1), per_event=per_event,
            recover_s=round(t_seen - t_up, 1))
