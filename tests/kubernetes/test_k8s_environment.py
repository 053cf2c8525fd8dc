"""A team's environment on Kubernetes: the prepared image pushed to a REAL registry on 127.0.0.1 (Docker's
distribution) by the real Docker engine, and the run's Job recorded by the contract API (real HTTP, fixture answers).

What no cluster here can show — a kubelet pulling the pushed digest, running the initContainer — is shown the other
way round: the initContainer's own command and securityContext, run on Docker, fill a runtime that a team's image
then runs flower's python from as the run's uid.
"""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path

import msgspec
import pytest
from _image_registry import ImageRegistry, serving_registry
from _k8s_api import RecordedAPI
from _k8s_checks import validate
from test_k8s_contract import JOBS, NS, SECRETS, api, backend_for, token_file  # noqa: F401  (fixtures)

from sandbox.backends.base import BackendError
from sandbox.backends.kubernetes import NO_REGISTRY, job_manifest, job_name
from sandbox.errors import BackendUnavailable, EnvironmentRefused
from sandbox.layout import RunLayout
from sandbox.prepare import PREPARED_REPO, push
from sandbox.runtime import FILL, RUNTIME, argv
from sandbox.spec import Prepared, RunSpec, write_spec
from sandbox.worktree import make_workspace, objects_dir

KEY = "0123456789abcdef01234567"


@pytest.fixture
def engine(docker_engine):
    import docker

    return docker.from_env()


@pytest.fixture
def prepared_image(engine, tmp_path: Path) -> str:
    """A small image of this test's own, standing for a prepared environment (``flower-env/<tenant>:<key>``)."""
    context = tmp_path / "image"
    context.mkdir()
    (context / "hello").write_text(uuid.uuid4().hex)  # a layer no other test has pushed
    (context / "Dockerfile").write_text("FROM scratch\nCOPY hello /hello\n")
    tag = f"{PREPARED_REPO}/k8s-test-{uuid.uuid4().hex[:8]}:{KEY}"
    engine.images.build(path=str(context), tag=tag, rm=True, network_mode="none")
    yield tag
    engine.images.remove(tag, force=True)


@pytest.fixture
def registry(tmp_path: Path):
    root = tmp_path / "registry"
    root.mkdir()
    with serving_registry(root) as served:
        yield served


@pytest.fixture
def login(tmp_path: Path, registry: ImageRegistry) -> Path:
    f = tmp_path / "config.json"
    f.write_text(registry.login())
    return f


def environment(image: str, **kw) -> Prepared:
    return Prepared(image=image, key=KEY, runtime="flower-runtime-0123456789abcdef",
                    env={"NODE_ENV": "test", "PATH": f"/usr/local/bin:/usr/bin:/bin:{RUNTIME}/flower-bin",
                         "HOME": "/root"}, **kw)


# -- the push ---------------------------------------------------------------------------------------------------
def test_push_puts_the_prepared_image_in_the_registry_and_names_it_by_digest(engine, prepared_image, registry,
                                                                            login) -> None:
    ref = push(environment(prepared_image), tenant="Acme Corp", registry=f"{registry.host}/flower", client=engine,
               auth_file=login)
    repository, _, digest = ref.partition("@")
    assert repository == f"{registry.host}/flower/{PREPARED_REPO}/acme-corp"
    assert digest.startswith("sha256:") and registry.digest(f"flower/{PREPARED_REPO}/acme-corp", KEY) == digest
    tags = engine.images.get(prepared_image).tags
    assert tags == [prepared_image], "the registry's tag is gone again: prune still sees one image per key"


def test_push_without_a_login_is_refused_with_what_to_check(engine, prepared_image, registry, tmp_path) -> None:
    with pytest.raises(EnvironmentRefused, match=r"refused the prepared environment .*environment_registry"):
        push(environment(prepared_image), tenant="acme", registry=f"{registry.host}/flower", client=engine)
    assert registry.digest(f"flower/{PREPARED_REPO}/acme", KEY) is None
    wrong = tmp_path / "wrong.json"
    wrong.write_text(ImageRegistry(registry.host, registry.user, "not-the-password").login())
    with pytest.raises(EnvironmentRefused, match="unauthorized"):
        push(environment(prepared_image), tenant="acme", registry=f"{registry.host}/flower", client=engine,
             auth_file=wrong)
    assert engine.images.get(prepared_image).tags == [prepared_image]


def test_a_login_file_that_is_not_a_docker_config_is_refused_by_name(engine, prepared_image, tmp_path) -> None:
    bad = tmp_path / "config.json"
    bad.write_text('{"auths": {"127.0.0.1:5000": {"user": "x"}}}')
    with pytest.raises(EnvironmentRefused, match=r"config.json are not a Docker config.json"):
        push(environment(prepared_image), tenant="acme", registry="127.0.0.1:5000/flower", client=engine,
             auth_file=bad)
    with pytest.raises(EnvironmentRefused, match="cannot be read"):
        push(environment(prepared_image), tenant="acme", registry="127.0.0.1:5000/flower", client=engine,
             auth_file=tmp_path / "missing.json")


def test_a_registry_that_does_not_answer_is_unavailable_not_a_refusal(engine, prepared_image, tmp_path) -> None:
    """The run waits its turn again (BackendUnavailable), as for an engine that is away."""
    root = tmp_path / "gone"
    root.mkdir()
    with serving_registry(root) as gone:
        host = gone.host
    with pytest.raises(BackendUnavailable, match=f"the registry {host}/flower does not answer"):
        push(environment(prepared_image), tenant="acme", registry=f"{host}/flower", client=engine)


# -- the run's Job ------------------------------------------------------------------------------------------------
def a_run(data_dir: Path, run_id: str, env: Prepared | None) -> tuple[RunLayout, RunSpec]:
    from sandbox.envfile import write_env_file

    repo = data_dir / "repos" / "acme"
    layout = RunLayout(data_dir / "runs", run_id, repo.name).ensure()
    base = make_workspace(repo, layout.workspace, layout.branch)
    spec = RunSpec(run_id, "acme", "make the tests pass", env={"FLOWER_EXTRA": "1"}, base=base,
                   objects=str(objects_dir(repo)), environment=env)
    write_spec(layout, spec)
    write_env_file(layout.env_file, {"ANTHROPIC_API_KEY": "sk-test-not-real"})
    return layout, spec


def test_a_run_in_its_team_environment_pulls_the_pushed_image_beside_flower_s_runtime(
        api, token_file, data_dir, engine, prepared_image, tmp_path) -> None:
    root = tmp_path / "registry"
    root.mkdir()
    env = environment(prepared_image, user="1000:1000")
    first, second = a_run(data_dir, "20250501-100000-aaaa1111", env), a_run(data_dir, "20250501-110000-bbbb2222", env)
    for layout, _ in (first, second):
        api.reply("POST", JOBS, 201, "job_created.json", name=job_name(layout), run=layout.run_id, dir=str(layout.dir))
        api.reply("POST", SECRETS, 201, "secret_created.json", name=job_name(layout), secret="ignored")
    with serving_registry(root) as registry:
        login = tmp_path / "config.json"
        login.write_text(registry.login())
        backend = backend_for(api, token_file, data_dir, registry=f"{registry.host}/flower", client=engine,
                              registry_auth=login, image_pull_secrets=["regcred"],
                              environment_pull_secrets=["flower-env-pull"])
        backend.start(*first)
        digest = registry.digest(f"flower/{PREPARED_REPO}/acme", KEY)
    backend.start(*second)  # the registry is gone: the image pushed once is not pushed again
    jobs = [r.body for r in api.requests if r.path == JOBS]
    assert len(jobs) == 2 and jobs[0]["spec"]["template"]["spec"]["containers"][0]["image"] == \
        jobs[1]["spec"]["template"]["spec"]["containers"][0]["image"]
    job = jobs[0]
    validate(job)
    layout, spec = first
    pod = job["spec"]["template"]["spec"]
    (run,) = pod["containers"]
    assert run["image"] == f"{registry.host}/flower/{PREPARED_REPO}/acme@{digest}"
    assert run["command"] == argv("sandbox.entrypoint", str(layout.spec_file)) and "args" not in run
    values = {e["name"]: e["value"] for e in run["env"]}
    assert values["NODE_ENV"] == "test" and values["PATH"] == env.env["PATH"]  # the team's environment…
    assert values["HOME"] == str(layout.home) and values["FLOWER_EXTRA"] == "1"  # …under the run's own
    assert len(values) == len(run["env"])
    mounts = {m["mountPath"]: m for m in run["volumeMounts"]}
    assert mounts[RUNTIME] == {"name": "runtime", "mountPath": RUNTIME, "readOnly": True}
    assert run["securityContext"]["readOnlyRootFilesystem"] is True and run["securityContext"]["runAsNonRoot"]
    (copy,) = pod["initContainers"]
    assert copy["image"] == "flower/sandbox:0.1.0" and copy["command"] == ["sh", "-c", FILL]
    assert copy["volumeMounts"] == [{"name": "runtime", "mountPath": RUNTIME}]
    assert copy["securityContext"]["capabilities"] == {"drop": ["ALL"], "add": ["CHOWN"]}
    assert copy["securityContext"]["allowPrivilegeEscalation"] is False
    assert {"name": "runtime", "emptyDir": {"sizeLimit": "2Gi"}} in pod["volumes"]
    # the pod's user is the service's (they share the claim), not the devcontainer's 1000:1000
    assert (pod["securityContext"]["runAsUser"], pod["securityContext"]["runAsGroup"]) == (10001, 10001)
    assert pod["imagePullSecrets"] == [{"name": "regcred"}, {"name": "flower-env-pull"}]
    assert "sk-test-not-real" not in json.dumps(job)


def test_a_run_without_an_environment_is_the_same_job_as_before(api, token_file, data_dir, engine) -> None:
    layout, spec = a_run(data_dir, "20250501-100000-cccc3333", None)
    api.reply("POST", JOBS, 201, "job_created.json", name=job_name(layout), run=layout.run_id, dir=str(layout.dir))
    api.reply("POST", SECRETS, 201, "secret_created.json", name=job_name(layout), secret="ignored")
    backend_for(api, token_file, data_dir, registry="127.0.0.1:5000/flower", client=engine,
                environment_pull_secrets=["flower-env-pull"]).start(layout, spec)
    pod = api.requests[0].body["spec"]["template"]["spec"]
    assert "initContainers" not in pod and "imagePullSecrets" not in pod
    assert pod["containers"][0]["image"] == "flower/sandbox:0.1.0"


def test_without_a_registry_a_team_environment_is_refused_naming_the_key(api, token_file, data_dir) -> None:
    layout, spec = a_run(data_dir, "20250501-100000-dddd4444", environment("flower-env/acme:" + KEY))
    backend = backend_for(api, token_file, data_dir)
    assert backend.client is None  # what the service's Environments sees: it refuses before any setup
    with pytest.raises(BackendError, match=r"set `environment_registry` in the service config \(the chart's "
                                           r"`environment.registry`\)"):
        backend.start(layout, spec)
    assert api.requests == []  # nothing was created
    with pytest.raises(BackendError) as e:
        job_manifest(layout, spec, image="flower/sandbox:0.1.0", namespace=NS, claim="flower-data",
                     data_dir=data_dir, objects=None, secret_name="s", uid=10001, gid=10001)
    assert str(e.value) == NO_REGISTRY


def test_the_service_refuses_a_team_environment_on_kubernetes_without_a_registry(tmp_path, data_dir) -> None:
    """Before any setup: the tenant's run fails with the sentence, which names the key to set."""
    from service.config import load_config
    from service.control.environments import Environments
    from service.tenants import Tenant

    from sandbox.backends.kubernetes import KubeAPI, KubernetesBackend

    tenants = tmp_path / "tenants.toml"
    tenants.write_text("")
    cfg = load_config(env={}, tenants=str(tenants), data_dir=str(data_dir), backend="kubernetes",
                      image="flower/sandbox:0.1.0", gateway_port=8081, gateway_url="http://flower:8081")
    assert cfg.environment_registry == ""
    backend = KubernetesBackend(KubeAPI("http://127.0.0.1:9"), image=cfg.image, namespace=NS, claim="flower-data",
                                data_dir=data_dir, uid=10001, gid=10001)
    repo = data_dir / "repos" / "acme"
    tenant = Tenant(name="acme", token_hash="x", repo=str(repo), credentials="unused", quota=1,
                    allowed_options=frozenset(), image="node:20-bookworm")
    from sandbox.worktree import head

    with pytest.raises(EnvironmentRefused, match=r"kubernetes once `environment_registry` names where to push"):
        Environments(cfg, backend).of(tenant, str(repo), head(str(repo)))


def test_the_config_key_takes_a_registry_and_refuses_a_url(tmp_path) -> None:
    from service.config import ServiceConfigError, load_config

    tenants = tmp_path / "tenants.toml"
    tenants.write_text("")
    for good in ("registry.example.com/flower", "127.0.0.1:5000", "reg.example:443/team/flower-envs"):
        assert load_config(env={}, tenants=str(tenants), data_dir=str(tmp_path),
                           environment_registry=good).environment_registry == good
    for bad in ("https://registry.example.com/flower", "registry.example.com/Flower", "reg:port/x"):
        with pytest.raises(ServiceConfigError, match="environment_registry"):
            load_config(env={}, tenants=str(tenants), data_dir=str(tmp_path), environment_registry=bad)


# -- the pod's two containers, played on Docker -------------------------------------------------------------------
def test_the_init_container_fills_a_runtime_a_team_image_runs_as_the_run_s_uid(engine, data_dir, tmp_path) -> None:
    """The initContainer's command and securityContext as Docker flags (root with CAP_CHOWN alone, read-only root,
    no new privileges, no network) fill a volume standing for the emptyDir; a team's image (glibc, /bin/sh, nothing
    of flower's) then runs flower's python from it as the pod's uid, with the runtime read-only."""
    import docker

    from sandbox.image import build_base, ensure_image

    sandbox_image = ensure_image()
    team = build_base()  # Debian's debootstrap base: glibc and a shell, nothing of flower's
    layout, spec = a_run(data_dir, "20250501-100000-eeee5555", environment(team))
    job = job_manifest(layout, spec, image=sandbox_image, namespace=NS, claim="flower-data", data_dir=data_dir,
                       objects=None, secret_name="s", uid=10001, gid=10001, environment_image=team)
    pod = job["spec"]["template"]["spec"]
    (copy,), (run,) = pod["initContainers"], pod["containers"]
    sc = copy["securityContext"]
    volume = engine.volumes.create(f"k8s-test-runtime-{uuid.uuid4().hex[:8]}")
    try:
        engine.containers.run(copy["image"], copy["command"], entrypoint=[], remove=True, network_mode="none",
                              user=f"{sc['runAsUser']}:{sc['runAsGroup']}", cap_drop=sc["capabilities"]["drop"],
                              cap_add=sc["capabilities"]["add"], read_only=sc["readOnlyRootFilesystem"],
                              security_opt=["no-new-privileges"],
                              volumes={volume.name: {"bind": copy["volumeMounts"][0]["mountPath"], "mode": "rw"}})
        user = f"{pod['securityContext']['runAsUser']}:{pod['securityContext']['runAsGroup']}"
        assert run["command"] == argv("sandbox.entrypoint", str(layout.spec_file))
        with pytest.raises(docker.errors.ContainerError) as e:  # the run's own command, asked for its usage
            engine.containers.run(run["image"], [*run["command"][:-1], "--help"], entrypoint=[], remove=True,
                                  network_mode="none", user=user, read_only=True, cap_drop=["ALL"],
                                  security_opt=["no-new-privileges"], stderr=True,
                                  volumes={volume.name: {"bind": RUNTIME, "mode": "ro"}})
        assert e.value.exit_status == 2
        assert "usage: python -m sandbox.entrypoint SPEC_FILE" in e.value.stderr.decode()
    finally:
        volume.remove(force=True)


def test_the_environment_job_is_valid_kubernetes_with_limits_on_both_containers(prepared, data_dir) -> None:
    layout, spec = prepared
    spec = msgspec.structs.replace(spec, environment=environment("flower-env/acme:" + KEY))
    job = job_manifest(layout, spec, image="flower/sandbox:0.1.0", namespace=NS, claim="flower-data",
                       data_dir=data_dir, objects=None, secret_name="s", uid=10001, gid=10001, cpu="2",
                       memory="4Gi", environment_image=f"127.0.0.1:5000/flower/{PREPARED_REPO}/acme@sha256:" + "0" * 64,
                       runtime_size="3Gi")
    validate(job)
    pod = job["spec"]["template"]["spec"]
    assert pod["initContainers"][0]["resources"] == pod["containers"][0]["resources"]
    assert {"name": "runtime", "emptyDir": {"sizeLimit": "3Gi"}} in pod["volumes"]


def test_from_environment_with_a_registry_connects_to_the_engine_docker_host_names(engine, tmp_path) -> None:
    """The chart's DOCKER_HOST and FLOWER_K8S_* variables build the backend; an engine that does not answer stops the
    start with a sentence (as the docker backend's does), not later at a team's first run."""
    from sandbox.backends.kubernetes import KubeAPI, KubernetesBackend

    host = os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"  # the engine this machine's tests use
    env = {"FLOWER_K8S_CLAIM": "flower-data", "FLOWER_K8S_NAMESPACE": NS, "DOCKER_HOST": host,
           "FLOWER_K8S_REGISTRY_AUTH": "/etc/flower/registry/config.json",
           "FLOWER_K8S_ENVIRONMENT_PULL_SECRETS": "envpull, other", "FLOWER_K8S_RUNTIME_SIZE": "3Gi"}
    api = KubeAPI("http://127.0.0.1:9", token="unused")
    backend = KubernetesBackend.from_environment("flower/sandbox:0.1.0", data_dir=tmp_path, env=env, api=api,
                                                 registry="registry.example.com/flower")
    assert backend.client is not None and backend.client.ping() is True
    assert str(backend.registry_auth) == "/etc/flower/registry/config.json"
    assert backend.environment_pull_secrets == ["envpull", "other"] and backend.runtime_size == "3Gi"
    gone = {**env, "DOCKER_HOST": f"unix://{tmp_path}/no-engine.sock"}
    with pytest.raises(BackendUnavailable, match=r"the Docker engine does not answer \(connect to the engine that "
                                                 r"prepares environments\)"):
        KubernetesBackend.from_environment("flower/sandbox:0.1.0", data_dir=tmp_path, env=gone, api=api,
                                           registry="registry.example.com/flower")
    without = KubernetesBackend.from_environment("flower/sandbox:0.1.0", data_dir=tmp_path, env=gone, api=api)
    assert without.client is None and without.registry is None  # no registry: no engine asked for
