"""Real runs through the real service: ``python -m service`` on 127.0.0.1, the LocalBackend, real git,
the real bundled CLI inside each run, driven by the scripted model the tenant's credentials point at."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from _service_helpers import (
    Deployment,
    Service,
    git,
    run_status,
    serve,
    sse,
    wait_for,
    wait_question,
    wait_status,
)
from flower.testing import Rule, ScriptedModel, say, tool
from sandbox.testing import ACHIEVED, ASK, BRIEF, CLARIFIER, GOAL, JUDGE, LEAD, REPORT

pytestmark = pytest.mark.cli


def clarify_rules(tag: str) -> list[Rule]:
    """A clarify-only run: one question to the person, then the brief."""
    return [Rule(tool(ASK, {"question": f"{tag} 用什么语言?", "options": ["Python", "Go"]}), system=CLARIFIER,
                 prompt=tag),
            Rule(say(BRIEF), system=CLARIFIER, prompt=tag, result="Python")]


# -- 1. the whole way ---------------------------------------------------------------------------------
def test_a_run_end_to_end_question_events_audit_diff(deployment: Deployment, services: list[Service]):
    rules = [
        *clarify_rules("帮我做一个 hello 程序"),
        Rule(say(GOAL), system=JUDGE, prompt="请为它设定目标"),
        # the coordinator tries to write itself (denied by its guard), then dispatches the worker
        Rule(tool("Write", {"file_path": "boss.txt", "content": "boss\n"}), system=LEAD, agent=False,
             prompt="把上面的需求做成"),
        Rule(tool("Agent", {"description": "实现 hello.py", "prompt": "WORKER-TASK 写 hello.py", "subagent_type": "coder",
                            "run_in_background": False}), system=LEAD, agent=False, error=True),
        Rule(tool("Write", {"file_path": "hello.py", "content": "print('hello')\n"}), agent=True, prompt="WORKER-TASK"),
        Rule(say(REPORT), agent=True, prompt="WORKER-TASK", result="hello.py"),
        Rule(say("hello.py 写好了"), system=LEAD, agent=False, result="写好了 hello.py"),
        Rule(say(ACHIEVED), system=JUDGE, prompt="第 1 轮工作结束了"),
    ]
    with ScriptedModel(rules) as model:
        service = serve(deployment, services, model)
        acme = service.client("acme")
        r = acme.post("/v1/runs", json={"ask": "帮我做一个 hello 程序", "options": {"rounds": 1}})
        assert r.status_code == 201, r.text
        run_id = r.json()["id"]
        assert r.json()["status"] == "queued" and r.headers["location"] == f"/v1/runs/{run_id}"

        q = wait_question(acme, run_id)
        assert q["question"] == "帮我做一个 hello 程序 用什么语言?" and q["options"] == ["Python", "Go"]
        assert run_status(acme, run_id)["status"] == "running"
        assert acme.post(f"/v1/runs/{run_id}/answers", json={"question_id": "nope", "text": "1"}).status_code == 404
        r = acme.post(f"/v1/runs/{run_id}/answers", json={"question_id": q["id"], "text": "1"})
        assert r.status_code == 200 and r.json()["accepted"], r.text

        events = sse(acme, run_id)  # replay from the start, then live, to the end
        final = wait_status(acme, run_id, ("succeeded", "failed", "aborted", "killed", "cancelled"))
    assert final["status"] == "succeeded", (final, (deployment.data / "runs" / run_id / "output.log").read_text()[-3000:])
    assert model.unmatched == [], [(r.system[:40], r.user[:80]) for r in model.unmatched]

    # SSE: numbered events, steps and tool calls, the question, and `end` last
    assert events[-1]["event"] == "end" and events[-1]["data"]["status"] == "succeeded"
    body = events[:-1]
    assert [int(e["id"]) for e in body] == sorted(int(e["id"]) for e in body)
    assert all(e["data"]["seq"] == int(e["id"]) for e in body)
    steps = [e["data"]["text"] for e in body if e["event"] == "step"]
    assert steps == ["确认需求", "设定目标", "工作"], steps
    calls = [(e["data"]["tool"], e["data"]["payload"].get("subagent")) for e in body if e["event"] == "tool_call"]
    assert ("Write", False) in calls and ("Agent", False) in calls and ("Write", True) in calls, calls
    asked = [e["data"]["payload"]["id"] for e in body if e["event"] == "ask" and "用什么语言" in e["data"]["text"]]
    assert asked and set(asked) == {q["id"]}, (asked, q["id"])  # one question id: the event's = /questions' = /answers'

    denied = [e["data"] for e in body if e["event"] == "audit" and e["data"]["text"] == "deny"]
    assert denied and denied[0]["payload"]["tool"] == "Write"
    # ?after=N replays only what follows N
    tail = sse(acme, run_id, after=int(body[-3]["id"]))
    assert [e.get("id") for e in tail] == [body[-2]["id"], body[-1]["id"], None]
    assert [e.get("id") for e in sse(acme, run_id, last_event_id=body[-2]["id"])] == [body[-1]["id"], None]

    # the audit log: the coordinator's denied Write, as JSON with tenant and run
    audits = [line for line in service.lines() if line.get("event") == "audit.deny"]
    wire = [line for line in audits if line.get("source") == "wire"]  # the model gateway's, from the traffic
    assert wire and wire[0]["run"] == run_id and wire[0]["tool"] == "Write" and "协调者" in wire[0]["reason"], wire
    audit = [line for line in audits if line.get("source") == "run"]  # the run's own, with the guard's fields
    assert audit, "no audit.deny line in the service log"
    assert audit[0]["tenant"] == "acme" and audit[0]["run"] == run_id and audit[0]["tool"] == "Write"
    assert audit[0]["level"] == "warning" and audit[0]["role"] and audit[0]["guard"]
    # the log's own words say what the denial means (the reason is the guard's Chinese sentence to its model)
    assert audit[0]["meaning"] == "the coordinator does not do the work itself: Write is left to a subagent it " \
        "dispatches", audit[0]
    assert wire[0]["meaning"] == "a guard in the run refused Write (reason: its words to the model)"
    assert "sk-scripted-not-a-real-key" not in service.log_path.read_text(), "a credential reached the log"

    # the work is committed on flower/<run> from the repo's HEAD; the team's checkout is untouched
    repo = deployment.repos["acme"]
    assert final["branch"] == f"flower/{run_id}" and final["base"] == git(repo, "rev-parse", "HEAD").strip()
    assert git(repo, "show", f"flower/{run_id}:hello.py") == "print('hello')\n"
    assert final["commit"] == git(repo, "rev-parse", f"flower/{run_id}").strip()
    assert not (repo / "hello.py").exists() and git(repo, "status", "--porcelain") == ""
    assert git(repo, "worktree", "list").count("\n") == 1, "no worktree of the team's repository is ever made"
    assert not (deployment.data / "runs" / run_id / repo.name).exists(), "the finished run's checkout is removed"
    assert {f["path"] for f in final["diffstat"]["files"]} == {"hello.py"}
    r = acme.get(f"/v1/runs/{run_id}/diff")
    assert r.status_code == 200 and r.headers["content-type"] == "text/x-diff; charset=utf-8"
    assert "+++ b/hello.py" in r.text and "+print('hello')" in r.text and "boss.txt" not in r.text

    # the manifest and exit
    m = acme.get(f"/v1/runs/{run_id}/manifest").json()
    assert m["exit"]["status"] == "succeeded" and [s["step"] for s in m["steps"]][:3] == ["确认需求", "设定目标", "工作"]
    assert acme.get(f"/v1/runs/{run_id}/questions").json() == {"questions": []}
    assert acme.post(f"/v1/runs/{run_id}/messages", json={"text": "late"}).status_code == 409
    assert acme.post(f"/v1/runs/{run_id}/cancel").status_code == 409
    listed = acme.get("/v1/runs").json()["runs"]
    assert [r["id"] for r in listed] == [run_id]
    assert not (deployment.data / "runs" / run_id / "flower.env").exists(), "credentials go when the run ends"


# -- 2. quotas ------------------------------------------------------------------------------------------
def test_tenant_quota_and_global_limit_keep_runs_queued_until_a_slot_frees(tmp_path: Path, services: list[Service]):
    deployment = Deployment(tmp_path / "limits", quota=1, max_running=2)
    deployment.write_tenants(beta={"quota": 2})
    rules = [r for tag in ("任务A1", "任务A2", "任务B1", "任务B2") for r in clarify_rules(tag)]
    with ScriptedModel(rules) as model:
        service = serve(deployment, services, model)
        acme, beta = service.client("acme"), service.client("beta")
        opts = {"clarify_only": True}
        a1 = acme.post("/v1/runs", json={"ask": "任务A1", "options": opts}).json()["id"]
        a2 = acme.post("/v1/runs", json={"ask": "任务A2", "options": opts}).json()["id"]
        b1 = beta.post("/v1/runs", json={"ask": "任务B1", "options": opts}).json()["id"]
        b2 = beta.post("/v1/runs", json={"ask": "任务B2", "options": opts}).json()["id"]
        a3 = acme.post("/v1/runs", json={"ask": "任务A3 (cancelled while queued)", "options": opts}).json()["id"]

        qa1, qb1 = wait_question(acme, a1), wait_question(beta, b1)
        time.sleep(0.5)  # several scheduler passes
        status = {i: run_status(c, i)["status"] for c, i in ((acme, a1), (acme, a2), (beta, b1), (beta, b2))}
        assert status == {a1: "running", a2: "queued", b1: "running", b2: "queued"}, status  # quota, global
        r = acme.post(f"/v1/runs/{a3}/cancel")
        assert r.status_code == 200 and r.json()["status"] == "cancelled"
        assert beta.get(f"/v1/runs/{a3}").status_code == 404

        acme.post(f"/v1/runs/{a1}/answers", json={"question_id": qa1["id"], "text": "1"})
        assert wait_status(acme, a1, ("succeeded", "failed"))["status"] == "succeeded"
        qa2 = wait_question(acme, a2)  # acme's slot went to its next run, not to beta's (global limit: 2)
        assert run_status(beta, b2)["status"] == "queued"
        beta.post(f"/v1/runs/{b1}/answers", json={"question_id": qb1["id"], "text": "Python"})
        qb2 = wait_question(beta, b2)
        acme.post(f"/v1/runs/{a2}/answers", json={"question_id": qa2["id"], "text": "1"})
        beta.post(f"/v1/runs/{b2}/answers", json={"question_id": qb2["id"], "text": "1"})
        for c, i in ((acme, a2), (beta, b1), (beta, b2)):
            assert wait_status(c, i, ("succeeded", "failed"))["status"] == "succeeded"
    started = {line["run"]: line["timestamp"] for line in service.lines() if line.get("event") == "run.started"}
    assert set(started) == {a1, a2, b1, b2}, "the cancelled queued run never started"
    assert not (deployment.data / "runs" / a3).exists()


# -- 3. cancel ------------------------------------------------------------------------------------------
def test_cancel_stops_a_running_run(deployment: Deployment, services: list[Service]):
    with ScriptedModel(clarify_rules("一直等回答")) as model:
        service = serve(deployment, services, model)
        acme = service.client("acme")
        run_id = acme.post("/v1/runs", json={"ask": "一直等回答", "options": {"clarify_only": True}}).json()["id"]
        wait_question(acme, run_id)
        assert acme.post(f"/v1/runs/{run_id}/messages", json={"text": "顺便说一句"}).status_code == 202
        r = acme.post(f"/v1/runs/{run_id}/cancel")
        assert r.status_code == 200 and r.json()["status"] == "cancelled", r.text
        assert r.json()["error"] == "cancelled on request"
        events = sse(acme, run_id)
        assert events[-1] == {"event": "end", "data": {"status": "cancelled", "events": events[-1]["data"]["events"]}}
    from sandbox.backends import LocalBackend

    assert run_id not in LocalBackend().live()
    assert any(line.get("event") == "run.finished" and line.get("status") == "cancelled" for line in service.lines())


def test_a_cancel_in_the_middle_of_a_model_call_ends_the_run(deployment: Deployment, services: list[Service]):
    """The model takes a minute to answer: the cancel does not wait for it (bench: the time it takes)."""
    from sandbox.testing import BRIEF as SLOW_BRIEF

    with ScriptedModel([Rule(say(SLOW_BRIEF, delay=60), system=CLARIFIER, prompt="慢慢想")]) as model:
        service = serve(deployment, services, model)
        acme = service.client("acme")
        run_id = acme.post("/v1/runs", json={"ask": "慢慢想", "options": {"clarify_only": True}}).json()["id"]
        wait_for(lambda: model.requests and run_status(acme, run_id)["status"] == "running", 120,
                 what="the model call in flight")
        r = acme.post(f"/v1/runs/{run_id}/cancel", params={"wait": 30})
        assert r.status_code == 200 and r.json()["status"] == "cancelled", r.text
        assert r.json()["branch"] is None, "a cancelled run that handed nothing back keeps no branch"
        assert f"flower/{run_id}" not in git(deployment.repos["acme"], "branch", "--list")
    from sandbox.backends import LocalBackend

    assert run_id not in LocalBackend().live()
    stopped = [line for line in service.lines() if line.get("event") == "run.stopped" and line.get("run") == run_id]
    assert stopped, "the backend stopped it"


def test_an_interrupt_over_the_api_redirects_the_step_in_flight(deployment: Deployment, services: list[Service]):
    """The turn is blocked on an open question (no message flows): the interrupt still lands at once."""
    rules = [Rule(tool(ASK, {"question": "用什么语言?"}), system=CLARIFIER, prompt="打断我"),
             Rule(say(BRIEF), system=CLARIFIER, user="别问了,用 Python")]
    with ScriptedModel(rules) as model:
        service = serve(deployment, services, model)
        acme = service.client("acme")
        run_id = acme.post("/v1/runs", json={"ask": "打断我", "options": {"clarify_only": True}}).json()["id"]
        wait_question(acme, run_id)
        r = acme.post(f"/v1/runs/{run_id}/interrupt", json={"text": "别问了,用 Python"})
        assert r.status_code == 202, r.text
        final = wait_status(acme, run_id, ("succeeded", "failed", "aborted"))  # nobody answers the question
        events = sse(acme, run_id)
    assert final["status"] == "succeeded", final
    assert model.unmatched == []
    said = [(e["data"]["text"], e["data"]["payload"]) for e in events if e["event"] == "prompt"]
    assert said == [("别问了,用 Python", {"by": "person", "interrupt": True})], said  # not the CLI's own note
    log = (deployment.data / "runs" / run_id / f".flower-{deployment.repos['acme'].name}" / "notes" / "问答记录.md")
    assert "别问了,用 Python" in log.read_text()


def test_a_run_that_cannot_start_fails_with_the_reason_and_leaves_nothing(deployment: Deployment,
                                                                          services: list[Service]):
    with ScriptedModel(clarify_rules("先占着")) as model:
        service = serve(deployment, services, model)
        acme = service.client("acme")
        first = acme.post("/v1/runs", json={"ask": "先占着", "options": {"clarify_only": True}}).json()["id"]
        q = wait_question(acme, first)
        second = acme.post("/v1/runs", json={"ask": "排队的", "options": {"clarify_only": True}}).json()["id"]
        assert run_status(acme, second)["status"] == "queued"
        deployment.write_tenants(acme={"credentials": str(deployment.root / "rotated-away.env")})
        acme.post(f"/v1/runs/{first}/answers", json={"question_id": q["id"], "text": "1"})
        failed = wait_status(acme, second, ("failed", "succeeded", "running"))
    assert failed["status"] == "failed", failed
    assert failed["error"] == ("could not start the run: the credentials file of tenant acme is missing: ask the "
                               "operator of this service to fix it (the service's log says what and how)"), failed
    assert "rotated-away.env" not in failed["error"], "the operator's path is the operator's, not the tenant's"
    said = [x for x in service.lines() if x.get("event") == "tenant.not_ready" and x.get("run") == second]
    assert said and "rotated-away.env" in said[0]["error"], "the operator's log says where and the fix"
    assert failed["branch"] is None and failed["base"] is None
    assert not (deployment.data / "runs" / second).exists()
    assert f"flower/{second}" not in git(deployment.repos["acme"], "branch", "--list")
    assert run_status(acme, first)["status"] == "succeeded"
    assert acme.get(f"/v1/runs/{second}/diff").status_code == 409
    assert sse(acme, second)[-1] == {"event": "end", "data": {"status": "failed", "events": 0}}


# -- 4. restart -----------------------------------------------------------------------------------------
def test_a_restarted_service_reattaches_to_a_live_run_and_resumes_a_vanished_one(
        deployment: Deployment, services: list[Service]):
    rules = clarify_rules("重启之后继续") + [  # the vanished one asks again once resumed: its question went with it
        Rule(lambda req: tool(ASK, {"question": "用什么语言?", "options": ["Python", "Go"]}), system=CLARIFIER,
             prompt="重启期间消失", repeat=True, when=lambda req: "Python" not in req.result_text + req.user),
        Rule(say(BRIEF), system=CLARIFIER, prompt="重启期间消失", repeat=True)]
    with ScriptedModel(rules) as model:
        first = serve(deployment, services, model, "first")
        acme, beta = first.client("acme"), first.client("beta")
        keep = acme.post("/v1/runs", json={"ask": "重启之后继续", "options": {"clarify_only": True}}).json()["id"]
        gone = beta.post("/v1/runs", json={"ask": "重启期间消失", "options": {"clarify_only": True}}).json()["id"]
        q = wait_question(acme, keep)
        lost_question = wait_question(beta, gone)
        seen = run_status(acme, keep)["events"]
        assert seen > 0
        first.stop(signal.SIGKILL)  # a crash: nothing is cleaned up

        from sandbox.backends import LocalBackend

        live = LocalBackend(root=deployment.data / "runs").live()
        assert set(live) == {keep, gone}, "runs outlive the service"
        pid = int(live[gone].split(":")[1])
        os.killpg(pid, signal.SIGKILL)  # this one dies while nobody watches, without writing exit.json
        wait_for(lambda: gone not in LocalBackend().live(), 10, what="the killed run to disappear")

        second = Service(deployment, "second").start()
        services.append(second)
        acme, beta = second.client("acme"), second.client("beta")
        assert run_status(acme, keep)["status"] == "running"
        reattached = [line for line in second.lines() if line.get("event") == "run.reattached"]
        assert [line["run"] for line in reattached] == [keep]
        vanished = run_status(beta, gone)
        assert vanished["status"] in ("queued", "starting", "running") and vanished["error"] is None, vanished
        [loss] = vanished["losses"]
        assert loss["cause"] == "vanished" and "service restarted" in loss["error"], loss
        assert "no longer has this run's sandbox" in loss["error"]
        # resumed on its folder in a new sandbox, it asks again (its question went with the old one) and goes on
        again = wait_for(lambda: [x for x in beta.get(f"/v1/runs/{gone}/questions").json()["questions"]
                                  if x["id"] != lost_question["id"]], 90, what="the resumed run's question")[0]
        assert beta.post(f"/v1/runs/{gone}/answers", json={"question_id": again["id"], "text": "Python"}).status_code \
            == 200
        assert wait_status(beta, gone, ("succeeded", "failed"))["status"] == "succeeded"

        assert [x["id"] for x in acme.get(f"/v1/runs/{keep}/questions").json()["questions"]] == [q["id"]]
        acme.post(f"/v1/runs/{keep}/answers", json={"question_id": q["id"], "text": "1"})
        events = sse(acme, keep)
        assert wait_status(acme, keep, ("succeeded", "failed"))["status"] == "succeeded"
    assert events[-1]["event"] == "end" and events[-1]["data"]["status"] == "succeeded"
    seqs = [int(e["id"]) for e in events[:-1]]
    assert seqs == sorted(set(seqs)) and seqs[0] == 1 and seqs[-1] > seen, "no event lost or repeated"
    assert any(e["event"] == "ask" for e in events)
