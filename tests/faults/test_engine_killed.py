"""Issue 33: the Docker engine is killed (SIGKILL to dockerd and its containerd) under five live runs and started
again without ``--live-restore``, so its restart stops every container: each run lost its sandbox, and each is
resumed in a new one on its own folder and succeeds. The engine is one this test starts (as test_engine_away.py's).
Fails instead of skipping when FLOWER_REQUIRE_DOCKER=1."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from _dockerd import OwnDockerd
from _faults import figures, need
from _service_helpers import Deployment, Service, serve, wait_for, wait_question, wait_status
from flower.testing import Rule, ScriptedModel, say, tool
from sandbox.testing import ASK, BRIEF, CLARIFIER

pytestmark = [pytest.mark.docker, pytest.mark.cli]

TERMINAL = ("succeeded", "failed", "aborted", "killed", "cancelled")
RUNS = 5


@pytest.fixture
def engine() -> Iterator[OwnDockerd]:
    if shutil.which("dockerd") is None or os.geteuid() != 0:
        need("a dockerd of the test's own needs the dockerd binary and root")
    state = Path(tempfile.mkdtemp(prefix="fk-", dir="/tmp"))  # short: the engine's sockets live under it
    own = OwnDockerd(state, live_restore=False)
    try:
        own.start()
    except AssertionError as e:
        need(f"our dockerd would not start: {e}")
    yield own
    if own.proc is None:
        own.start()
    own.remove_containers("flower.run")
    own.stop()
    shutil.rmtree(state, ignore_errors=True)


def test_five_live_runs_resume_and_succeed_after_the_engine_is_killed_and_started_again(
        tmp_path: Path, services: list[Service], engine: OwnDockerd, monkeypatch: pytest.MonkeyPatch):
    image = engine.ensure_run_image()
    monkeypatch.setenv("DOCKER_HOST", engine.host)
    deployment = Deployment(tmp_path, quota=RUNS, max_running=RUNS, backend="docker",
                            extra_config=f'image = "{image}"\nnetwork_mode = "host"\nresume_backoff_s = 0.5\n')
    tags = [f"引擎被杀-{i}" for i in range(RUNS)]
    rules = [r for tag in tags for r in (
        Rule(say(BRIEF), system=CLARIFIER, prompt=tag, repeat=True, when=lambda req: "Python" in req.result_text),
        Rule(lambda req, tag=tag: tool(ASK, {"question": f"{tag} 用什么语言?"}), system=CLARIFIER, prompt=tag,
             repeat=True))]
    with ScriptedModel(rules) as model:
        service = serve(deployment, services, model, timeout=180)
        acme = service.client("acme")
        runs = [acme.post("/v1/runs", json={"ask": tag, "options": {"clarify_only": True}}).json()["id"] for tag in tags]
        first = [wait_question(acme, run_id, 180)["id"] for run_id in runs]

        engine.kill()  # every container's engine gone at once
        engine.start()  # without live-restore: its restart stops the containers it finds
        resumed = []
        for run_id, old in zip(runs, first):  # each asks again in its new sandbox (its question went with the old)
            q = wait_for(lambda run_id=run_id, old=old: [x for x in acme.get(f"/v1/runs/{run_id}/questions").json()[
                "questions"] if x["id"] != old], 240, what=f"run {run_id} resumed and asking")[0]
            assert acme.post(f"/v1/runs/{run_id}/answers", json={"question_id": q["id"], "text": "Python"}
                             ).status_code == 200
        for run_id in runs:
            resumed.append(wait_status(acme, run_id, TERMINAL, 240))
    assert [r["status"] for r in resumed] == ["succeeded"] * RUNS, resumed
    assert all(r["sandboxes"] == 2 and len(r["losses"]) == 1 for r in resumed), resumed
    causes = sorted({r["losses"][0]["cause"] for r in resumed})
    assert set(causes) <= {"crashed", "vanished", "killed"}, causes
    figures("engine_killed", runs=RUNS, causes=causes, resumed=sum(r["sandboxes"] == 2 for r in resumed))
