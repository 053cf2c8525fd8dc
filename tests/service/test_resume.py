"""A run outlives its sandbox: killed three times — between steps, mid tool call, mid model call — it is resumed each
time in a new sandbox on its own folder and succeeds with every round's files, each resumed step continuing its own
session; a fourth loss fails it with the four causes listed. Through the real service, the real CLI, the local
backend (SIGKILL of its process group) and Docker (``docker kill``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from _resume import ASK_TEXT, FILES, RESUMED_NOTE, Rounds, kill_sandbox, sessions_of, wait_event
from _service_helpers import Deployment, Service, git, run_status, serve, sse, wait_question, wait_status
from flower.store.prune import PrunePolicy
from flower.testing import Rule, ScriptedModel, tool
from sandbox.testing import ASK, CLARIFIER, LEAD

pytestmark = pytest.mark.cli

FAST = "resume_backoff_s = 0.2\n"
ORPHAN = PrunePolicy().orphan_text  # what the library gives a tool call that never got its result


def _three_losses(deployment: Deployment, services: list[Service], backend: str) -> None:
    script = Rounds()
    with ScriptedModel(script.rules()) as model:
        service = serve(deployment, services, model, timeout=600)  # Docker's first start may build the image
        acme = service.client("acme")
        r = acme.post("/v1/runs", json={"ask": ASK_TEXT, "options": {"rounds": 3}})
        assert r.status_code == 201, r.text
        run_id = r.json()["id"]
        folder = deployment.data / "runs" / run_id
        script.checkout = folder / deployment.repos["acme"].name
        q = wait_question(acme, run_id)
        assert acme.post(f"/v1/runs/{run_id}/answers", json={"question_id": q["id"], "text": "Python"}).status_code == 200

        # 1. between steps: the work step begun, its CLI not yet asked anything
        at = wait_event(folder, lambda e: e["kind"] == "step" and e["text"] == "工作")
        kill_sandbox(backend, deployment.data, run_id)
        # 2. mid tool call: round 1's Bash waits for a gate the test makes only after the kill
        at = wait_event(folder, lambda e: e["kind"] == "tool_call" and e["tool"] == "Bash", after=at)
        kill_sandbox(backend, deployment.data, run_id)
        (script.checkout / ".gate").write_text("")
        # 3. mid model call: the coordinator's call after round 2's report is held while its sandbox dies
        script.hold_model.set()
        assert script.held.wait(180), "the coordinator's call after round 2 never came"
        kill_sandbox(backend, deployment.data, run_id)
        script.release.set()

        done = wait_status(acme, run_id, ("succeeded", "failed"), timeout=300)
        assert done["status"] == "succeeded", done
        stream = sse(acme, run_id)
    broken = [e["data"]["text"] for e in stream if e["event"] == "system" and "checkpoint failed" in e["data"]["text"]]
    assert broken == [], "every checkpoint of the resumed sandboxes held (a killed git leaves its locks)"
    for name in FILES:  # every round's file, in the run's branch
        assert git(deployment.repos["acme"], "show", f"flower/{run_id}:{name}").strip() == "done", name
    assert done["sandboxes"] == 4 and [x["cause"] for x in done["losses"]] == ["crashed"] * 3, done
    places = [x["place"] for x in done["losses"]]
    assert places[0] == "step start" and places[1].startswith("tool Bash") and places[2] == "model call", places
    resumed = [e for e in stream if e["event"] == "system" and e["data"]["payload"].get("subtype") == "resumed"]
    assert len(resumed) == 3 and all(e["data"]["payload"]["cause"] == "crashed" for e in resumed)
    seqs = [int(e["id"]) for e in stream[:-1]]
    assert seqs == sorted(set(seqs)) and seqs[0] == 1, "one stream, its numbers growing across the sandboxes"

    # each resumed coordinator continued its own session: same id, its earlier messages there
    lead = sessions_of(model, LEAD)
    notes = [i for i, r in enumerate(model.conversation)
             if not r.is_subagent and LEAD in r.system and RESUMED_NOTE in r.user]
    assert len(notes) == 2, "resumed twice inside the work step (mid tool call, mid model call)"
    first = lead[0][0]
    for i in notes:
        req = model.conversation[i]
        assert req.session == first, "the same session, not a fresh one"
        assert "把上面的需求做成" in req.prompt and len(req.messages) > 2, "its earlier messages are there"
    # a tool call in flight at a loss is marked interrupted, as after a person's interrupt: every tool use the
    # resumed session holds has its result — the library's own "interrupted" one for the dispatch that was cut (when
    # the transcript had kept it: what was not yet written at the kill is what the loss cost)
    for i in notes:
        blocks = [b for m in model.conversation[i].messages if isinstance(m["content"], list) for b in m["content"]]
        used = [b["id"] for b in blocks if b.get("type") == "tool_use"]
        results = {b["tool_use_id"]: b for b in blocks if b.get("type") == "tool_result"}
        assert all(u in results for u in used), "a tool call with no result: the API would refuse the conversation"
        cut = [results[u] for u in used if ORPHAN in str(results[u].get("content"))]
        assert all(b.get("is_error") for b in cut)
    assert len({s for s, _, _ in lead}) == 1, lead


def test_a_run_killed_three_times_resumes_each_time_and_succeeds_local(tmp_path: Path, services: list[Service]):
    _three_losses(Deployment(tmp_path, extra_config=FAST), services, "local")


@pytest.mark.docker
def test_a_run_killed_three_times_resumes_each_time_and_succeeds_docker(docker_engine: object, tmp_path: Path,
                                                                          services: list[Service]):
    deployment = Deployment(tmp_path, backend="docker", extra_config=f'network_mode = "host"\n{FAST}')
    _three_losses(deployment, services, "docker")


def test_a_fourth_loss_fails_the_run_with_the_four_causes_listed(tmp_path: Path, services: list[Service]):
    deployment = Deployment(tmp_path, extra_config=FAST)
    rules = [Rule(lambda req: tool(ASK, {"question": "等着"}), system=CLARIFIER, repeat=True)]
    with ScriptedModel(rules) as model:
        service = serve(deployment, services, model)
        acme = service.client("acme")
        run_id = acme.post("/v1/runs", json={"ask": "一个会被杀四次的活", "options": {"clarify_only": True}}).json()["id"]
        folder = deployment.data / "runs" / run_id
        at = 0
        for i in range(4):
            at = wait_event(folder, lambda e: e["kind"] == "ask" and e["payload"].get("state") == "asked", after=at,
                            row=lambda: run_status(acme, run_id))
            kill_sandbox("local", deployment.data, run_id)
            at += 1
        done = wait_status(acme, run_id, ("succeeded", "failed"), timeout=120)
    assert done["status"] == "failed", done
    assert "more than max_resumes = 3" in done["error"], done["error"]
    assert [f"{i})" in done["error"] for i in (1, 2, 3, 4)] == [True] * 4, done["error"]
    assert len(done["losses"]) == 4 and done["sandboxes"] == 4
    assert len(model.sessions()) == 1, "every resume continued the one clarify session"
