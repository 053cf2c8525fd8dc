"""The team's environment through the service: a tenant's image, setup and setup-only secret, and a repository's
own devcontainer.json — prepared before the run, kept for the next, a failing setup failing the run with its tail
and the next run preparing again. Docker backend, real CLI, scripted model."""

from __future__ import annotations

import hashlib
import os
import io
import uuid

import pytest

from _service_helpers import (Deployment, Service, git, remove_prepared, serve, stop_services, wait_for,
                              wait_question, wait_status)
from flower.testing import Rule, ScriptedModel, say, tool
from sandbox.testing import ACHIEVED, ASK, BRIEF, CLARIFIER, GIT_CHECKED, GOAL, JUDGE, LEAD, REPORT

pytestmark = [pytest.mark.docker, pytest.mark.cli]

SECRET = "setup-only-" + uuid.uuid4().hex
BARE = "FROM flower/base:bookworm\nRUN rm -f /usr/bin/git /usr/bin/python3* && rm -rf /usr/lib/git-core\n"
PROBE = ("cat /usr/local/share/marker 2>&1; ls node_modules 2>&1; echo mode=${TEAM_MODE:-unset} "
         f"tok=${{TEAM_TOKEN:-none}}; grep -l {SECRET} /proc/*/environ 2>/dev/null | wc -l; echo {GIT_CHECKED}")
ENDED = ("succeeded", "failed", "aborted", "killed", "cancelled")


def probe_rules(ask: str) -> list[Rule]:
    return [
        Rule(tool(ASK, {"question": "用什么语言?", "options": ["Python", "Go"]}), system=CLARIFIER, prompt=ask),
        Rule(say(BRIEF.replace("做一个 hello.py", f"做一个 hello.py ({ask})")), system=CLARIFIER, prompt=ask,
             result="Python"),
        Rule(say(GOAL), system=JUDGE, prompt="请为它设定目标"),
        Rule(tool("Agent", {"description": "probe", "prompt": "WORKER-TASK " + ask, "subagent_type": "coder",
                            "run_in_background": False}), system=LEAD, agent=False, prompt=ask),
        Rule(tool("Bash", {"command": f"echo 'asked: {ask}'; {PROBE}", "description": "probe"}), agent=True,
             prompt="WORKER-TASK " + ask),
        Rule(say(REPORT), agent=True, prompt="WORKER-TASK " + ask, result=GIT_CHECKED),
        Rule(say("done"), system=LEAD, agent=False, prompt=ask, result="写好了"),
        Rule(say(ACHIEVED), system=JUDGE, prompt="第 1 轮工作结束了"),
    ]


@pytest.fixture(scope="module")
def bare(docker_engine) -> str:
    import docker

    from sandbox.image import build_base

    build_base()
    client = docker.from_env()
    tag = f"flower-test/bare:{hashlib.sha256(BARE.encode()).hexdigest()[:12]}"
    try:
        client.images.get(tag)
    except docker.errors.ImageNotFound:
        client.images.build(fileobj=io.BytesIO(BARE.encode()), tag=tag, rm=True, network_mode="none")
    return tag


@pytest.fixture(autouse=True)
def no_prepared_images(docker_engine):
    """acme's and beta's prepared images are this test's alone: a killed earlier run's would be counted."""
    remove_prepared("acme", "beta")
    yield


def run_one(service: Service, tenant: str, ask: str) -> dict:
    client = service.client(tenant)
    r = client.post("/v1/runs", json={"ask": ask})
    assert r.status_code == 201, r.text
    run_id = r.json()["id"]
    q = wait_question(client, run_id, timeout=600)  # a first setup comes before the question
    assert client.post(f"/v1/runs/{run_id}/answers", json={"question_id": q["id"], "text": "1"}).status_code == 200
    return wait_status(client, run_id, ENDED, timeout=300)


def probe_of(model: ScriptedModel, ask: str) -> list[str]:
    seen = [r["text"] for req in model.conversation for r in req.results]
    for text in seen:
        if GIT_CHECKED in text and f"asked: {ask}" in text:
            return text.splitlines()[1:]
    raise AssertionError(f"no probe output for {ask!r} in {[t[:200] for t in seen]}")


def test_a_tenants_image_and_a_repositorys_devcontainer_each_run_their_setup_once(bare, tmp_path,
                                                                                   services: list[Service]):
    import docker

    d = Deployment(tmp_path, backend="docker", extra_config='network_mode = "host"\n')
    secrets = tmp_path / "secrets" / "acme.setup.env"
    secrets.write_text(f"TEAM_TOKEN={SECRET}\n")
    secrets.chmod(0o600)
    beta = d.repos["beta"]
    (beta / ".devcontainer").mkdir()
    (beta / ".devcontainer" / "devcontainer.json").write_text(
        '// the team\'s own\n{"image": "%s", "containerEnv": {"TEAM_MODE": "dc"},\n'
        ' "postCreateCommand": {"marker": "echo devcontainer > /usr/local/share/marker"},}\n' % bare)
    git(beta, "add", ".")
    git(beta, "commit", "-qm", "devcontainer")
    setup = ['test "$TEAM_TOKEN" = "%s"' % SECRET,
             "mkdir -p node_modules/left-pad && echo tenant > /usr/local/share/marker"]
    d.write_tenants(acme={"image": bare, "setup": setup, "setup_secrets_file": str(secrets)})
    asks = ["acme first", "beta first", "acme second"]
    rules = [r for ask in asks for r in probe_rules(ask)]
    client = docker.from_env()
    try:
        with ScriptedModel(rules) as model:
            service = serve(d, services, model, timeout=600)
            first = run_one(service, "acme", asks[0])
            assert first["status"] == "succeeded", first
            other = run_one(service, "beta", asks[1])
            assert other["status"] == "succeeded", other
            again = run_one(service, "acme", asks[2])
            assert again["status"] == "succeeded", again
            assert model.unmatched == []
            acme1, beta1, acme2 = (probe_of(model, a) for a in asks)
        assert acme1[:2] == ["tenant", "left-pad"] and "mode=unset tok=none" in acme1 and "0" in acme1, acme1
        assert beta1[0] == "devcontainer" and "mode=dc tok=none" in beta1, beta1
        assert acme2 == acme1
        # one prepared image each: the second acme run found it
        assert len(client.images.list(name="flower-env/acme")) == 1
        assert len(client.images.list(name="flower-env/beta")) == 1
    finally:
        remove_prepared("acme", "beta")


def test_a_failing_setup_fails_the_run_with_its_tail_and_the_next_prepares_again(bare, tmp_path,
                                                                                 services: list[Service]):
    import docker

    d = Deployment(tmp_path, backend="docker", extra_config='network_mode = "host"\n')
    d.write_tenants(acme={"image": bare, "setup": ["echo fetching; echo 'npm ERR! 404 @team/gone' >&2; exit 7"]})
    client = docker.from_env()
    try:
        with ScriptedModel(probe_rules("after the fix")) as model:
            service = serve(d, services, model, timeout=600)
            acme = service.client("acme")
            r = acme.post("/v1/runs", json={"ask": "broken setup"})
            failed = wait_status(acme, r.json()["id"], ENDED, timeout=300)
            assert failed["status"] == "failed", failed
            assert "setup exited 7" in failed["error"] and "npm ERR! 404 @team/gone" in failed["error"], failed
            assert client.images.list(name="flower-env/acme") == []
            d.write_tenants(acme={"image": bare, "setup": ["echo fixed > /usr/local/share/marker"]})
            fixed = run_one(service, "acme", "after the fix")
            assert fixed["status"] == "succeeded", fixed
            assert probe_of(model, "after the fix")[0] == "fixed"
    finally:
        remove_prepared("acme")


def test_a_devcontainer_json_that_does_not_parse_fails_the_run_with_where_and_the_next_commit_runs(
        bare, tmp_path, services: list[Service]):
    d = Deployment(tmp_path, backend="docker", extra_config='network_mode = "host"\n')
    beta = d.repos["beta"]
    (beta / ".devcontainer").mkdir()
    (beta / ".devcontainer" / "devcontainer.json").write_text('{\n  "image": "%s"\n  "features": {}\n}\n' % bare)
    git(beta, "add", ".")
    git(beta, "commit", "-qm", "a broken devcontainer")
    with ScriptedModel(probe_rules("after the fix")) as model:
        service = serve(d, services, model, timeout=600)
        client = service.client("beta")
        r = client.post("/v1/runs", json={"ask": "broken devcontainer"})
        failed = wait_status(client, r.json()["id"], ENDED, timeout=300)
        assert failed["status"] == "failed", failed
        assert "DevContainerError: .devcontainer/devcontainer.json:3:" in failed["error"], failed["error"]
        (beta / ".devcontainer" / "devcontainer.json").write_text(
            '{"image": "%s", "postCreateCommand": "echo fixed > /usr/local/share/marker"}\n' % bare)
        git(beta, "commit", "-qam", "fixed")
        fixed = run_one(service, "beta", "after the fix")
        assert fixed["status"] == "succeeded", fixed
        assert probe_of(model, "after the fix")[0] == "fixed"
    remove_prepared("beta")


def test_once_prepared_a_teams_runs_claim_sandboxes_waiting_in_its_environment(bare, tmp_path,
                                                                               services: list[Service]):
    import docker

    d = Deployment(tmp_path, backend="docker", extra_config='network_mode = "host"\nwarm = 1\n')
    d.write_tenants(acme={"image": bare, "setup": ["mkdir -p node_modules/left-pad && echo warm > "
                                                   "/usr/local/share/marker"]})
    client = docker.from_env()
    try:
        with ScriptedModel(probe_rules("cold first") + probe_rules("warm second")) as model:
            service = serve(d, services, model, timeout=600)
            assert run_one(service, "acme", "cold first")["status"] == "succeeded"
            image = client.images.list(name="flower-env/acme")[0]

            def waiting() -> bool:
                return any(c.image.id == image.id and "flower.warm" in c.labels
                           for c in client.containers.list(filters={"label": "flower.warm"}))

            wait_for(waiting, 300, every=0.5, what="a sandbox waiting in acme's prepared environment")
            second = run_one(service, "acme", "warm second")
            assert second["status"] == "succeeded", second
            started = [x for x in service.lines() if x.get("event") == "run.started" and x.get("run") == second["id"]]
            assert started and started[0]["warm"], "the second run took the waiting sandbox"
            assert probe_of(model, "warm second")[:2] == ["warm", "left-pad"]
    finally:
        stop_services(services)  # its waiting sandboxes stay (a restarted service would use them): they go too
        remove_prepared("acme")


def test_a_service_stopped_during_a_setup_ends_it_and_the_run_waits_its_turn(bare, tmp_path,
                                                                            services: list[Service]):
    import docker
    import signal

    d = Deployment(tmp_path, backend="docker", extra_config='network_mode = "host"\n')
    d.write_tenants(acme={"image": bare, "setup": ["sleep 900"]})
    client = docker.from_env()
    try:
        with ScriptedModel(probe_rules("stopped mid-setup")) as model:
            service = serve(d, services, model, timeout=600)
            acme = service.client("acme")
            run_id = acme.post("/v1/runs", json={"ask": "stopped mid-setup"}).json()["id"]

            def setups() -> list:
                return client.containers.list(all=True, filters={"label": "org.flower.setup"})

            wait_for(lambda: setups() or None, 300, every=0.5, what="the setup's container")
            # what its tenant reads meanwhile: it is starting, and why it is not running yet
            said = wait_for(lambda: (lambda r: r if "sleep 900" in (r.get("waiting") or "") else None)(
                acme.get(f"/v1/runs/{run_id}").json()), 60, what="the run to say its setup")
            assert said["status"] == "starting" and "team's environment is being prepared" in said["waiting"], said
            proc = service.proc
            assert proc is not None
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(60)  # within a minute, not the setup's fifteen (uvicorn exits by the signal it handled)
            service.proc = None
            service._log.close()
            assert setups() == []
            d.write_tenants(acme={"image": bare, "setup": ["echo again > /usr/local/share/marker"]})
            again = serve(d, services, model, timeout=600)
            final = run_one_existing(again, "acme", run_id)
            assert final["status"] == "succeeded", final
            assert probe_of(model, "stopped mid-setup")[0] == "again"
    finally:
        remove_prepared("acme")


def run_one_existing(service: Service, tenant: str, run_id: str) -> dict:
    client = service.client(tenant)
    q = wait_question(client, run_id, timeout=600)
    assert client.post(f"/v1/runs/{run_id}/answers", json={"question_id": q["id"], "text": "1"}).status_code == 200
    return wait_status(client, run_id, ENDED, timeout=300)
