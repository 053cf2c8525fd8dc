"""A run waiting for a person gives its sandbox back (``parked``: no process of it remains, no slot, no token) and an
answer brings it back in a new sandbox, its step continuing its session with the person's words as the answer to
what it asked; a question that times out while parked wakes it with "nobody answered", never an invented answer; a
parked run survives the service's SIGKILL. Through the real service, the real CLI and the local backend."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from _service_helpers import TOKENS, Deployment, Service, run_status, serve, wait_for, wait_question, wait_status
from flower.core.channel import TIMEOUT
from flower.testing import Rule, ScriptedModel, say, tool
from flower.testing.script import Request
from sandbox.testing import ASK, BRIEF, CLARIFIER, marked_pids
from test_remote_cli import client_env, flower
from test_results import SECRET, Receiver

pytestmark = pytest.mark.cli

ANSWER = "用 Python,越短越好"
NOBODY = TIMEOUT.split("(")[0]  # "没有人回答": the channel's own words for a question nobody answered


def _rules(tag: str) -> list[Rule]:
    """Asks once (a tool use of its own each time), then writes the brief once the answer — or the word that nobody
    answered — is in what it reads."""
    heard = lambda req: ANSWER in req.user + req.result_text or NOBODY in req.user  # noqa: E731
    return [Rule(say(BRIEF), system=CLARIFIER, prompt=tag, repeat=True, when=heard),
            Rule(lambda req: tool(ASK, {"question": f"{tag}:用什么语言?"}), system=CLARIFIER, prompt=tag, repeat=True)]


def _deployment(tmp_path: Path, receiver: Receiver | None = None, park_after_s: float = 0.5) -> Deployment:
    dep = Deployment(tmp_path, extra_config="webhook_retry_s = 0.05\n")
    hooks: dict[str, object] = {}
    if receiver is not None:
        (tmp_path / "secrets" / "acme.hook").write_text(SECRET + "\n")
        hooks = {"webhook_url": receiver.url, "webhook_secret_file": str(tmp_path / "secrets" / "acme.hook")}
    dep.write_tenants(acme={"park_after_s": park_after_s, **hooks})
    return dep


def _metric(service: Service, name: str, **labels: str) -> float:
    """A sample of ``GET /metrics`` as anyone reads it (no scrape token: summed over tenants)."""
    text = service.client(None).get("/metrics").text
    want = "{" + ",".join(f'{k}="{v}"' for k, v in labels.items()) + "}" if labels else ""
    m = re.search(rf"^{re.escape(name + want)} (\S+)$", text, re.M)
    return float(m.group(1)) if m else 0.0


def _parked(acme, run_id: str) -> dict[str, object]:  # type: ignore[no-untyped-def]
    return wait_status(acme, run_id, ("parked",), timeout=60)


def test_a_waiting_run_parks_with_nothing_running_and_an_answer_resumes_its_session(
        tmp_path: Path, services: list[Service]):
    receiver = Receiver()
    dep = _deployment(tmp_path, receiver)
    with ScriptedModel(_rules("停车")) as model:
        service = serve(dep, services, model)
        acme = service.client("acme")
        run_id = acme.post("/v1/runs", json={"ask": "停车", "options": {"clarify_only": True}}).json()["id"]
        q = wait_question(acme, run_id)
        parked = _parked(acme, run_id)
        assert parked["parked_at"] and parked["sandboxes"] == 1
        wait_for(lambda: not marked_pids(run_id), 30, what="every process of the parked run to end")
        assert _metric(service, "flower_runs", status="parked") == 1
        assert _metric(service, "flower_run_parks_total") == 1
        assert [x["id"] for x in acme.get(f"/v1/runs/{run_id}/questions").json()["questions"]] == [q["id"]], \
            "its question stays open while it is parked"
        env = client_env(tmp_path / "home")
        (tmp_path / "home").mkdir()
        env["FLOWER_LANG"] = "en"
        assert flower(env, "--server", service.url, "--token", TOKENS["acme"], "login").returncode == 0
        shown = flower(env, "show", run_id)
        assert shown.returncode == 0, shown.stderr
        assert re.search(r"status\s+parked", shown.stdout) and "no sandbox until it is answered" in shown.stdout, \
            shown.stdout
        assert q["id"] in shown.stdout, "its open question, answerable while it is parked"

        r = acme.post(f"/v1/runs/{run_id}/answers", json={"question_id": q["id"], "text": ANSWER})
        assert r.status_code == 200, r.text
        done = wait_status(acme, run_id, ("succeeded", "failed"), timeout=120)
        assert done["status"] == "succeeded", done
        assert done["sandboxes"] == 2 and done["losses"] == []
        assert _metric(service, "flower_run_resumes_total", cause="unparked") == 1
        wait_for(lambda: {"run.parked", "run.resumed", "run.ended"} <= {g["event"] for g in receiver.got}, 30,
                 what="the parked, resumed and ended webhooks")
    logs = flower(env, "logs", run_id)
    assert logs.returncode == 0, logs.stderr
    assert "x the run's sandbox was stopped" in logs.stdout
    assert "~ resumed in a new sandbox: it was parked while it waited, and woken" in logs.stdout, logs.stdout
    shown = flower(env, "show", run_id)
    assert re.search(r"resumed\s+1×", shown.stdout), shown.stdout
    events = [g["event"] for g in receiver.got]
    assert events.count("run.parked") == 1 and events.count("run.resumed") == 1 and events.count("run.started") == 1
    assert all(g["signed"] for g in receiver.got)
    # the step continued its own session, reading the person's words as the answer to its question
    woke = [r for r in model.conversation if ANSWER in r.user]
    assert woke and len(model.sessions()) == 1, model.sessions()
    assert "停车:用什么语言?" in woke[0].user, "the answer comes with the question it answers"


def test_a_parked_runs_question_that_times_out_wakes_it_with_nobody_answered(tmp_path: Path, services: list[Service]):
    dep = _deployment(tmp_path)
    with ScriptedModel(_rules("没人理")) as model:
        service = serve(dep, services, model)
        acme = service.client("acme")
        run_id = acme.post("/v1/runs", json={"ask": "没人理", "options": {"clarify_only": True, "timeout_s": 4}}
                           ).json()["id"]
        wait_question(acme, run_id)
        _parked(acme, run_id)
        done = wait_status(acme, run_id, ("succeeded", "failed"), timeout=120)
    assert done["status"] == "succeeded" and done["sandboxes"] == 2, done
    told: list[Request] = [r for r in model.conversation if NOBODY in r.user]
    assert told, "the resumed step read that nobody answered"
    assert not any(ANSWER in r.user for r in model.conversation), "no answer was invented"


def test_a_parked_run_survives_the_services_sigkill_and_resumes_once_when_answered(
        tmp_path: Path, services: list[Service]):
    import signal

    dep = _deployment(tmp_path)
    with ScriptedModel(_rules("重启也停着")) as model:
        first = serve(dep, services, model, "first")
        acme = first.client("acme")
        run_id = acme.post("/v1/runs", json={"ask": "重启也停着", "options": {"clarify_only": True}}).json()["id"]
        q = wait_question(acme, run_id)
        _parked(acme, run_id)
        wait_for(lambda: not marked_pids(run_id), 30, what="the parked run's processes to end")
        first.stop(signal.SIGKILL)
        second = Service(dep, "second").start()
        services.append(second)
        acme = second.client("acme")
        assert run_status(acme, run_id)["status"] == "parked"
        assert acme.post(f"/v1/runs/{run_id}/answers", json={"question_id": q["id"], "text": ANSWER}).status_code == 200
        done = wait_status(acme, run_id, ("succeeded", "failed"), timeout=120)
    assert done["status"] == "succeeded" and done["sandboxes"] == 2, done
    resumed = [x for x in second.lines() if x.get("event") == "run.resumed" and x.get("run") == run_id]
    assert len(resumed) == 1


def test_on_postgresql_a_parked_run_outlives_the_replica_that_parked_it_and_another_resumes_it_once(
        tmp_path: Path, services: list[Service], postgres_url: str):
    import signal

    dep = Deployment(tmp_path, extra_config=f'database_url = "{postgres_url}"\nlease_s = 4\n')
    dep.write_tenants(acme={"park_after_s": 0.5})
    with ScriptedModel(_rules("换个副本")) as model:
        dep.set_credentials(model.env)
        replicas = [Service(dep, name, env={"FLOWER_SERVICE_REPLICA": name}).start(timeout=180) for name in ("r1", "r2")]
        services.extend(replicas)
        acme = replicas[0].client("acme")
        run_id = acme.post("/v1/runs", json={"ask": "换个副本", "options": {"clarify_only": True}}).json()["id"]
        q = wait_question(acme, run_id)
        _parked(acme, run_id)
        wait_for(lambda: not marked_pids(run_id), 30, what="the parked run's processes to end")
        parked_by = [s for s in replicas if any(x.get("event") == "run.parked" for x in s.lines())]
        assert len(parked_by) == 1
        parked_by[0].stop(signal.SIGKILL)
        other = next(s for s in replicas if s is not parked_by[0]).client("acme")
        assert run_status(other, run_id)["status"] == "parked"
        assert other.post(f"/v1/runs/{run_id}/answers", json={"question_id": q["id"], "text": ANSWER}).status_code \
            == 200
        done = wait_status(other, run_id, ("succeeded", "failed"), timeout=120)
    assert done["status"] == "succeeded" and done["sandboxes"] == 2, done
    resumed = [x for s in replicas for x in s.lines() if x.get("event") == "run.resumed" and x.get("run") == run_id]
    assert len(resumed) == 1, "resumed once, by the replica left"
