"""KubernetesBackend against a recorded API contract: real HTTP on 127.0.0.1, fixture answers shaped like the
Kubernetes API reference, every request recorded and checked (method, path, query, body, token, RBAC).

No cluster is reachable here: this shows the backend makes the calls the API documents and reads the answers it
documents, not that a cluster behaves as documented.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest
from _k8s_api import FIXTURES, RecordedAPI, fixture, permission_of
from _k8s_checks import K8S_VERSIONS, validate

from sandbox.backends import Backend
from sandbox.backends.base import BackendError
from sandbox.backends.kubernetes import API_PERMISSIONS, KubeAPI, KubernetesBackend, job_name

NS = "flower"
JOBS = f"/apis/batch/v1/namespaces/{NS}/jobs"
PODS = f"/api/v1/namespaces/{NS}/pods"
SECRETS = f"/api/v1/namespaces/{NS}/secrets"
SCOPE = {"flower.service": "0123456789abcdef"}


@pytest.fixture
def token_file(tmp_path: Path) -> Path:
    f = tmp_path / "token"
    f.write_text("token-one\n")
    return f


@pytest.fixture
def api():
    """The recorded API; afterwards every request must have been expected, allowed by the Role, and authorised."""
    with RecordedAPI(namespace=NS) as server:
        yield server
    assert not server.unexpected, [f"{r.method} {r.path}" for r in server.unexpected]
    assert not server.pending(), f"expected but never asked: {server.pending()}"
    for req in server.requests:
        group, resource, verb = permission_of(req, NS)
        assert verb in API_PERMISSIONS.get((group, resource), ()), f"{req.method} {req.path} needs {verb} {resource}"
        assert req.headers["authorization"].startswith("Bearer token-")


def backend_for(api: RecordedAPI, token_file: Path, data_dir: Path, **kw) -> KubernetesBackend:
    return KubernetesBackend(KubeAPI(api.url, token_file=token_file), image="flower/sandbox:0.1.0", namespace=NS,
                             claim="flower-data", data_dir=data_dir, labels=SCOPE, uid=10001, gid=10001,
                             poll_s=0.01, **kw)


def test_the_recorded_answers_have_the_api_reference_shapes() -> None:
    """The fixtures themselves validate against the schema of the API they stand for (1.33: status included,
    with fields such as podReplacementPolicy that 1.27 did not have)."""
    subs = dict(name="flower-x-0a1b2c3d", namespace=NS, run="x", dir="/var/lib/flower/runs/x", secret="s",
                resource="jobs.batch", kind="jobs", verb="create", group="batch")
    for path in sorted(FIXTURES.glob("*.json")):
        doc = fixture(path.name, **subs)
        if doc["kind"] == "Status":
            assert {"status", "metadata"} <= set(doc)
            continue
        validate(doc, versions=(K8S_VERSIONS[-1],))


def test_start_creates_the_job_then_its_env_secret_owned_by_it(api, token_file, prepared, data_dir) -> None:
    layout, spec = prepared
    name = job_name(layout)
    api.reply("POST", JOBS, 201, "job_created.json", name=name, run=layout.run_id, dir=str(layout.dir))
    api.reply("POST", SECRETS, 201, "secret_created.json", name=name, secret="ignored")
    backend = backend_for(api, token_file, data_dir)
    assert isinstance(backend, Backend)
    assert backend.start(layout, spec) == name
    post_job, post_secret = api.requests
    assert post_job.headers["content-type"] == "application/json"
    assert post_job.headers["authorization"] == "Bearer token-one"
    job = post_job.body
    validate(job)
    assert job["metadata"]["name"] == name and job["metadata"]["namespace"] == NS
    assert job["spec"]["backoffLimit"] == 0
    assert {"flower.run": layout.run_id, "flower.tenant": "acme", **SCOPE}.items() <= job["metadata"]["labels"].items()
    secret = post_secret.body
    validate(secret)
    volume = next(v for v in job["spec"]["template"]["spec"]["volumes"] if v["name"] == "env")
    assert secret["metadata"]["name"] == volume["secret"]["secretName"]  # the Job mounts the Secret made for it
    assert volume["secret"]["defaultMode"] == 0o400
    assert secret["metadata"]["name"].startswith(f"{name}-env-")
    assert secret["metadata"]["ownerReferences"][0]["uid"] == fixture("job_created.json", name=name, namespace=NS,
                                                                     run="x", dir="/x")["metadata"]["uid"]
    assert base64.b64decode(secret["data"]["flower.env"]) == layout.env_file.read_bytes()
    assert "sk-test-not-real" not in json.dumps(job)


def test_start_refuses_a_run_whose_job_still_runs(api, token_file, prepared, data_dir) -> None:
    layout, spec = prepared
    name = job_name(layout)
    api.reply("POST", JOBS, 409, "status_already_exists.json", name=name)
    api.reply("GET", f"{JOBS}/{name}", 200, "job_running.json", name=name, run=layout.run_id, dir=str(layout.dir))
    with pytest.raises(BackendError, match="already running as Job"):
        backend_for(api, token_file, data_dir).start(layout, spec)
    assert [r.method for r in api.requests] == ["POST", "GET"]  # no Secret, nothing deleted


def test_start_replaces_a_finished_leftover_job(api, token_file, prepared, data_dir) -> None:
    layout, spec = prepared
    name = job_name(layout)
    api.reply("POST", JOBS, 409, "status_already_exists.json", name=name)
    api.reply("GET", f"{JOBS}/{name}", 200, "job_failed.json", name=name, run=layout.run_id, dir=str(layout.dir))
    api.reply("DELETE", f"{JOBS}/{name}", 200, "status_success.json", name=name)
    api.reply("POST", JOBS, 201, "job_created.json", name=name, run=layout.run_id, dir=str(layout.dir))
    api.reply("POST", SECRETS, 201, "secret_created.json", name=name, secret="ignored")
    assert backend_for(api, token_file, data_dir).start(layout, spec) == name
    delete = api.requests[2]
    assert delete.q("propagationPolicy") == "Background"


def test_a_refused_secret_deletes_the_job_and_says_what_to_fix(api, token_file, prepared, data_dir) -> None:
    layout, spec = prepared
    name = job_name(layout)
    api.reply("POST", JOBS, 201, "job_created.json", name=name, run=layout.run_id, dir=str(layout.dir))
    api.reply("POST", SECRETS, 403, "status_forbidden.json", resource="secrets", verb="create", group="")
    api.reply("DELETE", f"{JOBS}/{name}", 200, "status_success.json", name=name)
    with pytest.raises(BackendError, match=r"credentials Secret.*403 Forbidden.*Role"):
        backend_for(api, token_file, data_dir).start(layout, spec)
    assert api.requests[-1].q("propagationPolicy") == "Background"


def test_state_and_exit_code_follow_the_job_status(api, token_file, data_dir) -> None:
    name, run = "flower-r1-0a1b2c3d", "r1"
    job = f"{JOBS}/{name}"
    subs = dict(name=name, run=run, dir=str(data_dir / "runs" / run))
    api.reply("GET", job, 200, "job_running.json", **subs)
    api.reply("GET", job, 200, "job_running.json", **subs)
    api.reply("GET", job, 200, "job_failed.json", **subs)
    api.reply("GET", job, 200, "job_failed.json", **subs)
    api.reply("GET", PODS, 200, "pod_list_terminated.json", name=name)
    api.reply("GET", job, 404, "status_not_found.json", name=name, resource="jobs.batch", kind="jobs")
    api.reply("GET", job, 404, "status_not_found.json", name=name, resource="jobs.batch", kind="jobs")
    b = backend_for(api, token_file, data_dir)
    assert b.state(name) == "running"
    assert b.exit_code(name) is None          # still running: no pod lookup
    assert b.state(name) == "exited"
    assert b.exit_code(name) == 3             # the run container's terminated.exitCode
    assert b.state(name) == "missing"
    assert b.exit_code(name) is None
    pods = [r for r in api.requests if r.path == PODS]
    assert len(pods) == 1 and pods[0].q("labelSelector") == f"flower.job={name}"


def test_exit_code_of_a_finished_job_whose_pod_is_gone(api, token_file, data_dir) -> None:
    name, run = "flower-r2-0a1b2c3d", "r2"
    folder = data_dir / "runs" / run
    (folder / "outbox").mkdir(parents=True)
    (folder / "outbox" / "exit.json").write_text(json.dumps({"status": "aborted", "exit_code": 3}))
    api.reply("GET", f"{JOBS}/{name}", 200, "job_failed.json", name=name, run=run, dir=str(folder))
    api.reply("GET", PODS, 200, "pod_list_empty.json")
    api.reply("GET", f"{JOBS}/{name}", 200, "job_succeeded.json", name=name, run=run, dir=str(data_dir / "none"))
    api.reply("GET", PODS, 200, "pod_list_empty.json")
    b = backend_for(api, token_file, data_dir)
    assert b.exit_code(name) == 3             # from the run's exit.json on the shared volume
    assert b.exit_code(name) == 0             # nothing left but the Complete condition


def test_live_lists_this_services_running_jobs_by_label(api, token_file, data_dir) -> None:
    api.reply("GET", JOBS, 200, "job_list.json")
    live = backend_for(api, token_file, data_dir).live()
    # the running Job and the one not started yet (empty status); the Complete one is not live
    assert live == {"20250501-100000-aaaa1111": "flower-20250501-100000-aaaa1111-0a1b2c3d",
                    "20250501-110000-cccc3333": "flower-20250501-110000-cccc3333-8c9d0e1f"}
    (req,) = api.requests
    assert req.query == {"labelSelector": ["flower.run,flower.service=0123456789abcdef,flower.claim=flower-data"]}


def test_stop_deletes_the_pod_with_the_grace_period_then_waits_for_the_job(api, token_file, data_dir) -> None:
    name, run = "flower-r3-0a1b2c3d", "r3"
    folder = data_dir / "runs" / run
    (folder / "outbox").mkdir(parents=True)
    subs = dict(name=name, run=run, dir=str(folder))
    api.reply("GET", f"{JOBS}/{name}", 200, "job_running.json", **subs)
    api.reply("GET", PODS, 200, "pod_list_running.json", name=name)
    api.reply("DELETE", f"{PODS}/{name}-x7k2p", 200, "pod_deleting.json", name=name)
    api.reply("GET", f"{JOBS}/{name}", 200, "job_running.json", **subs)  # still terminating
    api.reply("GET", f"{JOBS}/{name}", 200, "job_failed.json", **subs)
    backend_for(api, token_file, data_dir).stop(name, timeout=5)
    delete = next(r for r in api.requests if r.method == "DELETE")
    assert delete.query == {"gracePeriodSeconds": ["5"]}
    exit_data = json.loads((folder / "outbox" / "exit.json").read_text())  # the run could not write one: stop() did
    assert exit_data["status"] == "killed"


@pytest.mark.parametrize("pods", ["pod_list_empty.json", "pod_list_running.json"], ids=["no-pod-yet", "pod-lingers"])
def test_stop_deletes_the_job_when_there_is_no_pod_to_signal_or_it_outlives_its_pod(api, token_file, data_dir,
                                                                                     pods) -> None:
    name, run = "flower-r8-0a1b2c3d", "r8"
    folder = data_dir / "runs" / run
    (folder / "outbox").mkdir(parents=True)
    api.reply("GET", f"{JOBS}/{name}", 200, "job_created.json", name=name, run=run, dir=str(folder))  # no pod yet
    api.reply("GET", PODS, 200, pods, name=name)
    if pods == "pod_list_running.json":
        api.reply("DELETE", f"{PODS}/{name}-x7k2p", 200, "pod_deleting.json", name=name)
    api.reply("DELETE", f"{JOBS}/{name}", 200, "status_success.json", name=name)
    backend_for(api, token_file, data_dir, stop_margin_s=0).stop(name, timeout=0)
    assert api.requests[-1].method == "DELETE" and api.requests[-1].q("propagationPolicy") == "Background"
    if pods == "pod_list_running.json":
        assert api.requests[-2].query == {"gracePeriodSeconds": ["0"]}
    assert json.loads((folder / "outbox" / "exit.json").read_text())["status"] == "killed"


def test_stop_of_an_ended_or_unknown_job_deletes_nothing(api, token_file, data_dir) -> None:
    name = "flower-r4-0a1b2c3d"
    folder = data_dir / "runs" / "r4"
    (folder / "outbox").mkdir(parents=True)
    (folder / "outbox" / "exit.json").write_text(json.dumps({"status": "succeeded", "exit_code": 0}))
    api.reply("GET", f"{JOBS}/{name}", 200, "job_succeeded.json", name=name, run="r4", dir=str(folder))
    api.reply("GET", f"{JOBS}/{name}", 404, "status_not_found.json", name=name, resource="jobs.batch", kind="jobs")
    b = backend_for(api, token_file, data_dir)
    b.stop(name)
    b.stop(name)
    assert [r.method for r in api.requests] == ["GET", "GET"]
    assert json.loads((folder / "outbox" / "exit.json").read_text())["status"] == "succeeded"  # left as the run wrote it


def test_remove_deletes_the_job_in_the_background_and_tolerates_404(api, token_file, data_dir) -> None:
    name = "flower-r5-0a1b2c3d"
    api.reply("DELETE", f"{JOBS}/{name}", 200, "status_success.json", name=name)
    api.reply("DELETE", f"{JOBS}/{name}", 404, "status_not_found.json", name=name, resource="jobs.batch", kind="jobs")
    b = backend_for(api, token_file, data_dir)
    b.remove(name)
    b.remove(name)
    assert [r.query for r in api.requests] == [{"propagationPolicy": ["Background"]}] * 2
    assert all(r.body is None for r in api.requests)


def test_logs_and_wait(api, token_file, data_dir) -> None:
    name, run = "flower-r6-0a1b2c3d", "r6"
    subs = dict(name=name, run=run, dir=str(data_dir / "runs" / run))
    api.reply("GET", PODS, 200, "pod_list_terminated.json", name=name)
    api.reply("GET", f"{PODS}/{name}-x7k2p/log", 200, "pod_log.txt")
    api.reply("GET", f"{JOBS}/{name}", 200, "job_running.json", **subs)
    api.reply("GET", f"{JOBS}/{name}", 200, "job_succeeded.json", **subs)
    api.reply("GET", f"{JOBS}/{name}", 200, "job_succeeded.json", **subs)
    api.reply("GET", PODS, 200, "pod_list_empty.json")
    b = backend_for(api, token_file, data_dir)
    assert b.logs(name) == (FIXTURES / "pod_log.txt").read_text()
    assert api.requests[1].q("container") == "run"
    assert b.wait(name, timeout=10) == 0


def test_api_errors_say_what_happened_and_the_token_file_is_reread(api, token_file, data_dir) -> None:
    name = "flower-r7-0a1b2c3d"
    api.reply("GET", f"{JOBS}/{name}", 403, "status_forbidden.json", resource="jobs", verb="get", group="batch")
    api.reply("GET", f"{JOBS}/{name}", 404, "status_not_found.json", name=name, resource="jobs.batch", kind="jobs")
    b = backend_for(api, token_file, data_dir)
    with pytest.raises(BackendError, match=r"403 Forbidden.*cannot get resource \"jobs\".*Role"):
        b.state(name)
    token_file.write_text("token-two\n")  # a projected token was rotated
    assert b.state(name) == "missing"
    assert [r.headers["authorization"] for r in api.requests] == ["Bearer token-one", "Bearer token-two"]


def test_an_api_that_does_not_answer_is_one_sentence(token_file, data_dir) -> None:
    import socket

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    b = KubernetesBackend(KubeAPI(f"http://127.0.0.1:{port}", token_file=token_file, timeout=2), image="i",
                          namespace=NS, claim="c", data_dir=data_dir)
    with pytest.raises(BackendError, match="did not answer GET"):
        b.state("flower-x-0a1b2c3d")


def test_in_cluster_settings_come_from_the_environment_and_the_service_account(tmp_path, data_dir) -> None:
    import certifi

    sa = tmp_path / "sa"
    sa.mkdir()
    (sa / "token").write_text("t")
    (sa / "namespace").write_text("team-ns\n")
    (sa / "ca.crt").write_bytes(Path(certifi.where()).read_bytes())  # any real PEM bundle will do
    env = {"KUBERNETES_SERVICE_HOST": "fd00::1", "KUBERNETES_SERVICE_PORT": "6443", "FLOWER_K8S_CLAIM": "flower-data",
           "FLOWER_K8S_RUN_CPU": "2", "FLOWER_K8S_RUN_MEMORY": "4Gi", "FLOWER_K8S_RUN_DEADLINE_S": "",
           "FLOWER_K8S_RUN_TTL_S": "600", "FLOWER_K8S_IMAGE_PULL_SECRETS": "regcred"}
    b = KubernetesBackend.from_environment("flower/sandbox:0.1.0", data_dir=data_dir, labels=SCOPE, env=env, sa_dir=sa)
    assert b.api.base_url == "https://[fd00::1]:6443" and b.api.token_file == sa / "token"  # no request is made
    assert b.namespace == "team-ns" and b.claim == "flower-data"
    assert (b.cpu, b.memory, b.deadline_s, b.ttl_s, b.image_pull_secrets) == ("2", "4Gi", None, 600, ["regcred"])
    with pytest.raises(BackendError, match="FLOWER_K8S_CLAIM"):
        KubernetesBackend.from_environment("i", data_dir=data_dir, env={**env, "FLOWER_K8S_CLAIM": ""}, sa_dir=sa)
    with pytest.raises(BackendError, match="inside a cluster"):
        KubernetesBackend.from_environment("i", data_dir=data_dir, env={"FLOWER_K8S_CLAIM": "c"}, sa_dir=sa)
    with pytest.raises(BackendError, match="whole number"):
        KubernetesBackend.from_environment("i", data_dir=data_dir, env={**env, "FLOWER_K8S_RUN_TTL_S": "soon"},
                                           sa_dir=sa)
