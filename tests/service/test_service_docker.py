"""The service as one machine runs it in production: the Docker backend, a container per run.

The image is made from this tree (no registry); containers use host networking to reach the
scripted model on 127.0.0.1. Fails instead of skipping when FLOWER_REQUIRE_DOCKER=1.
"""

from __future__ import annotations

import pytest

from _service_helpers import Deployment, Service, git, serve, wait_question, wait_status
from flower.testing import Rule, ScriptedModel, say, tool
from sandbox.testing import ASK, BRIEF, CLARIFIER

pytestmark = [pytest.mark.docker, pytest.mark.cli]


def test_a_clarify_run_in_a_container_answered_over_the_api(docker_engine, tmp_path, services: list[Service]):
    rules = [Rule(tool(ASK, {"question": "用什么语言?", "options": ["Python", "Go"]}), system=CLARIFIER),
             Rule(say(BRIEF), system=CLARIFIER, result="Python")]
    deployment = Deployment(tmp_path)
    deployment.config.write_text('data_dir = "data"\ntenants = "tenants.toml"\nbackend = "docker"\n'
                                 'network_mode = "host"\npoll_s = 0.1\n')  # no image named: built from this tree
    with ScriptedModel(rules) as model:
        service = serve(deployment, services, model, timeout=600)  # the first start may build the image
        acme = service.client("acme")
        r = acme.post("/v1/runs", json={"ask": "帮我做一个 hello 程序", "options": {"clarify_only": True}})
        assert r.status_code == 201, r.text
        run_id = r.json()["id"]
        q = wait_question(acme, run_id)
        assert acme.post(f"/v1/runs/{run_id}/answers", json={"question_id": q["id"], "text": "1"}).status_code == 200
        final = wait_status(acme, run_id, ("succeeded", "failed", "aborted", "killed", "cancelled"))
    assert final["status"] == "succeeded", final
    assert model.unmatched == []
    started = [x for x in service.lines() if x.get("event") == "run.started" and x.get("run") == run_id]
    assert started and not started[0]["handle"].startswith("local:"), "the run did not go through Docker"
    repo = deployment.repos["acme"]
    assert git(repo, "status", "--porcelain") == "" and final["branch"] == f"flower/{run_id}"
    brief = deployment.data / "runs" / run_id / ".flower-acme" / "notes" / "需求.md"
    assert "做一个 hello.py" in brief.read_text(encoding="utf-8")
