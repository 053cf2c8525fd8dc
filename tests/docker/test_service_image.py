"""The service image as operators run it on one machine: the Dockerfile's ``service`` target started with
testcontainers with service/compose.yaml's settings (read from that file) — uid 10001, a read-only root with a
tmpfs ``/tmp``, no capabilities, the config, the tenants file and the tenant's env file mounted read-only, the
Docker socket mounted (its group added) so the service starts each run's container as a sibling on the same
engine, and the data dir and the team's repository at the same path inside and out (the run containers' bind
mounts name host paths). A scripted run is driven to its end over the API from the host, through the real CLI
inside the sibling, against the scripted model on the host's 127.0.0.1 (so the runs use host networking). Both
images carry OCI labels and a HEALTHCHECK: the service's container turns healthy through GET /healthz, and the
sandbox image's own check passes in a container of it."""

from __future__ import annotations

import hashlib
import json
import os
import re
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "service"))

import flower  # noqa: E402
from _service_helpers import ALL_OPTIONS, make_repo, sse, wait_for, wait_status  # noqa: E402
from flower.testing import Rule, ScriptedModel, say, tool  # noqa: E402
from sandbox.testing import ACHIEVED, BRIEF, CLARIFIER, GOAL, JUDGE, LEAD, REPORT  # noqa: E402

pytestmark = [pytest.mark.docker, pytest.mark.cli]

UID = 10001  # the image's user (Dockerfile: USER 10001:10001), and the runs' default run_user
SOCKET = "/var/run/docker.sock"
TOKEN = "acme-token-0123456789abcdef"
ASK = "在容器里的服务"
DONE = "WORK-DONE"
ENDED = ("succeeded", "failed", "aborted", "killed", "cancelled")


def rules(ask: str) -> list[Rule]:
    """clarify → goal → the coordinator dispatches a worker that writes hello.txt with Bash → the judge."""
    task = f"WORKER-TASK {ask}"
    return [
        Rule(say(BRIEF), system=CLARIFIER, prompt=ask),
        Rule(say(GOAL), system=JUDGE, prompt="请为它设定目标"),
        Rule(tool("Agent", {"description": "do it", "prompt": task, "subagent_type": "coder",
                            "run_in_background": False}), system=LEAD, agent=False, prompt="把上面的需求做成"),
        Rule(tool("Bash", {"command": f"echo hello > hello.txt; id -u; echo {DONE}", "description": "work"}),
             agent=True, prompt=task),
        Rule(say(REPORT), agent=True, prompt=task, result=DONE),
        Rule(say("完成"), system=LEAD, agent=False, result="写好了"),
        Rule(say(ACHIEVED), system=JUDGE, prompt="第 1 轮工作结束了"),
    ]


@pytest.fixture(scope="module")
def images(docker_engine: None) -> tuple[str, str]:
    """(service, sandbox) images of this tree, built here with no registry (cached by content tag)."""
    from sandbox.image import ensure_image

    t0 = time.monotonic()
    service, sandbox = ensure_image("service"), ensure_image("sandbox")
    print(f"\nimages {service}, {sandbox} ready in {time.monotonic() - t0:.1f}s")
    return service, sandbox


def free_port() -> int:
    """A port for the service to listen on: its HEALTHCHECK asks the port its config names (0 names none)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def oci_labels(image: str) -> dict[str, str]:
    import docker

    labels = docker.from_env().images.get(image).labels or {}
    return {k.removeprefix("org.opencontainers.image."): v for k, v in labels.items()
            if k.startswith("org.opencontainers.image.")}


def test_both_images_carry_oci_labels_and_the_sandbox_image_passes_its_own_healthcheck(
        images: tuple[str, str]) -> None:
    import docker

    client = docker.from_env()
    for image, title in zip(images, ("flower service", "flower sandbox")):
        labels = oci_labels(image)
        assert labels.get("title") == title and labels.get("version") == flower.__version__, (image, labels)
        assert labels.get("licenses") == "Apache-2.0" and labels.get("description"), (image, labels)
        assert client.images.get(image).attrs["Config"].get("Healthcheck", {}).get("Test"), image
    test = client.images.get(images[1]).attrs["Config"]["Healthcheck"]["Test"]
    box = client.containers.run(images[1], entrypoint=["sleep", "120"], detach=True, network_mode="none",
                                read_only=True, healthcheck={"test": test, "interval": 500_000_000, "retries": 1})
    try:
        def health() -> str | None:
            box.reload()
            status = box.attrs["State"].get("Health", {}).get("Status")
            return status if status in ("healthy", "unhealthy") else None

        assert wait_for(health, 60, every=0.2, what="the sandbox image's healthcheck") == "healthy", box.attrs
    finally:
        box.remove(force=True)


def chown_tree(path: Path, uid: int = UID) -> None:
    for dirpath, dirnames, filenames in os.walk(path):
        for name in [dirpath, *(os.path.join(dirpath, n) for n in dirnames + filenames)]:
            os.lchown(name, uid, uid)


def host_git(repo: Path, *args: str) -> str:
    """git on the host (root) in the team's repository, which belongs to uid 10001 like in a deployment."""
    return subprocess.run(["git", "-c", f"safe.directory={repo}", *args], cwd=repo, check=True,
                          capture_output=True, text=True).stdout


class Siblings(threading.Thread):
    """Records every container the service starts on the engine (they are removed when their run ends)."""

    def __init__(self, scope: str) -> None:
        super().__init__(daemon=True)
        import docker

        self.client = docker.from_env()
        self.filters = {"label": f"flower.service={scope}"}
        self.seen: dict[str, dict[str, Any]] = {}
        self.done = threading.Event()

    def run(self) -> None:
        import docker

        while not self.done.is_set():
            try:  # list() inspects each container; one may be removed in between
                for c in self.client.containers.list(all=True, filters=self.filters):
                    self.seen.setdefault(c.id, c.attrs)
            except docker.errors.NotFound:
                pass
            time.sleep(0.1)

    def remove_all(self) -> None:
        self.done.set()
        for c in self.client.containers.list(all=True, filters=self.filters):
            c.remove(force=True)


COMPOSE = Path(__file__).resolve().parents[2] / "service" / "compose.yaml"


def _interpolate(value: Any, env: dict[str, str]) -> Any:
    """Compose's ``${VAR}``, ``${VAR:-default}`` and ``${VAR:?error}``, over the parsed file."""
    if isinstance(value, dict):
        return {k: _interpolate(v, env) for k, v in value.items()}
    if isinstance(value, list):
        return [_interpolate(v, env) for v in value]
    if not isinstance(value, str):
        return value

    def one(m: re.Match[str]) -> str:
        name, kind, rest = m.group(1), m.group(2), m.group(3)
        if env.get(name):
            return env[name]
        if kind == "?":
            raise AssertionError(f"compose.yaml needs {name}: {rest}")
        return rest or ""

    return re.sub(r"\$\{(\w+)(?::([-?])([^}]*))?\}", one, value)


def compose_container(env: dict[str, str]) -> Any:
    """service/compose.yaml's `flower` service as a testcontainers DockerContainer (what `docker compose up` runs)."""
    from testcontainers.core.container import DockerContainer

    svc = _interpolate(yaml.safe_load(COMPOSE.read_text())["services"]["flower"], env)
    c = DockerContainer(svc["image"])
    for key, value in svc.get("environment", {}).items():
        c.with_env(key, str(value))
    for volume in svc["volumes"]:
        src, dst, *mode = volume.split(":")
        c.with_volume_mapping(src, dst, mode[0] if mode else "rw")
    for mount in svc.get("tmpfs", []):
        path, _, options = mount.partition(":")
        c.with_tmpfs_mount(path, options)  # passed to Docker as the mount's options ("size=64m")
    return c.with_kwargs(user=svc["user"], read_only=svc["read_only"], network_mode=svc["network_mode"],
                         group_add=[str(g) for g in svc["group_add"]], cap_drop=svc["cap_drop"],
                         security_opt=svc["security_opt"])


def test_the_service_image_runs_a_scripted_ask_in_a_sibling_container(images: tuple[str, str],
                                                                     tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    from testcontainers.core.config import testcontainers_config

    monkeypatch.setenv("TESTCONTAINERS_RYUK_DISABLED", "true")  # the reaper's image cannot be pulled here
    monkeypatch.setattr(testcontainers_config, "ryuk_disabled", True)  # even if read (and cached) before this test
    service_image, sandbox_image = images
    root = tmp_path / "flower"
    etc, data, repos = root / "etc", root / "data", root / "repos"
    repo, creds = repos / "acme", etc / "acme.env"
    etc.mkdir(parents=True)
    data.mkdir(mode=0o700)
    make_repo(repo)
    main_head = host_git(repo, "rev-parse", "HEAD").strip()
    for d in (root, etc, repos):
        d.chmod(0o755)

    tenants = etc / "tenants.toml"
    tenants.write_text("[[tenant]]\n" + "".join(f"{k} = {json.dumps(v)}\n" for k, v in {
        "name": "acme", "token": TOKEN, "repo": str(repo), "credentials": str(creds), "quota": 1,
        "allowed_options": ALL_OPTIONS}.items()))
    config = etc / "service.toml"
    config.write_text(f'data_dir = "{data}"\ntenants = "{tenants}"\nbackend = "docker"\nimage = "{sandbox_image}"\n'
                      f'network_mode = "host"\nhost = "127.0.0.1"\nport = {free_port()}\npoll_s = 0.1\nlog_format = "json"\n')
    for f in (tenants, config):
        f.chmod(0o644)
    scope = hashlib.sha256(str(data / "runs").encode()).hexdigest()[:16]  # service.app.make_backend's label
    siblings = Siblings(scope)

    with ScriptedModel(rules(ASK)) as model:
        creds.write_text("".join(f"{k}={v}\n" for k, v in model.env.items()))
        creds.chmod(0o600)
        os.lchown(creds, UID, UID)
        for tree in (data, repo):  # what the service (uid 10001) writes; the config and tenants stay root's
            chown_tree(tree)
        container = compose_container({"FLOWER_SERVICE_IMAGE": service_image, "DOCKER_GID": str(os.stat(SOCKET).st_gid),
                                       "FLOWER_ETC": str(etc), "FLOWER_DATA": str(data), "FLOWER_REPOS": str(repos)})
        siblings.start()
        container.start()
        try:
            def listening() -> str | None:
                container.reload()
                out, err = container.get_logs()
                for line in (out + err).decode("utf-8", "replace").splitlines():
                    try:
                        item = json.loads(line)
                    except ValueError:
                        continue
                    if isinstance(item, dict) and item.get("event") == "service.listening":
                        return str(item["url"])
                assert container.status in ("created", "running"), (out + err).decode()[-3000:]
                return None

            url = wait_for(listening, 120, every=0.2, what="the service in its container to listen")
            with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=30) as api:
                health = api.get("/healthz").json()  # "guards" says the canary is still proving them, if it is
                assert health["status"] == "ok" and health["backend"] == "docker", health
                r = api.post("/v1/runs", json={"ask": ASK, "options": {"rounds": 1, "timeout_s": 60}})
                assert r.status_code == 201, r.text
                run_id = r.json()["id"]
                events = sse(api, run_id, timeout=300)
                done = wait_status(api, run_id, ENDED, timeout=300)
                logs = b"".join(container.get_logs()).decode("utf-8", "replace")
                assert done["status"] == "succeeded", (done, logs[-4000:])
                patch = api.get(f"/v1/runs/{run_id}/diff")
                manifest = api.get(f"/v1/runs/{run_id}/manifest").json()
            # the service removed its run's container itself when the run ended
            leftover = siblings.client.containers.list(all=True, filters={"label": f"flower.run={run_id}"})
            worker = [x["text"] for req in model.conversation for x in req.results if DONE in x["text"]]

            def health() -> str | None:  # the image's HEALTHCHECK: GET /healthz every 15 s
                container.reload()
                state = container.get_wrapped_container().attrs["State"].get("Health", {})
                return "healthy" if state.get("Status") == "healthy" else None

            healthy = wait_for(health, 120, every=0.5, what="the service's container to be healthy")
            info = container.get_wrapped_container()
            info.reload()
            attrs = info.attrs
        finally:
            container.stop()
            siblings.remove_all()

    # the service ran as operators run it: uid 10001, read-only root, socket group only, no capabilities
    host = attrs["HostConfig"]
    assert attrs["Config"]["User"] == f"{UID}:{UID}" and host["ReadonlyRootfs"] is True
    assert host["GroupAdd"] == [str(os.stat(SOCKET).st_gid)] and host["Privileged"] is False
    rw = {m["Destination"]: m["RW"] for m in attrs["Mounts"]}
    assert rw == {str(etc): False, str(data): True, str(repos): True, SOCKET: True}, rw
    assert attrs["Config"]["Env"].count(f"FLOWER_SERVICE_CONFIG={config}") == 1
    # its run was a sibling on the same engine: the sandbox image, hardened, at the host's paths
    runs = [a for a in siblings.seen.values() if a["Config"]["Labels"].get("flower.run") == run_id]
    assert len(runs) == 1, siblings.seen.keys()
    run = runs[0]
    assert run["Config"]["Image"] == sandbox_image and run["Config"]["User"] == f"{UID}:{UID}"
    assert run["HostConfig"]["ReadonlyRootfs"] and run["HostConfig"]["CapDrop"] == ["ALL"]
    assert run["Config"]["Labels"]["flower.dir"] == str(data / "runs" / run_id)
    assert not any(m["Source"] == SOCKET for m in run["Mounts"]), "the run never gets the Docker socket"
    assert worker and f"\n{UID}\n" in f"\n{worker[0]}", worker
    # the work came back through the API and into the team's repository, on the run's branch only
    assert events and events[-1]["event"] == "end"
    assert patch.status_code == 200 and "+++ b/hello.txt" in patch.text and "+hello" in patch.text, patch.text
    assert [s["step"] for s in manifest["steps"]][:3] == ["确认需求", "设定目标", "工作"], manifest
    assert host_git(repo, "diff", "--name-only", "main", f"flower/{run_id}") == "hello.txt\n"
    assert host_git(repo, "rev-parse", "main").strip() == main_head
    assert host_git(repo, "status", "--porcelain") == ""
    assert leftover == [], leftover
    assert healthy == "healthy", "the service's HEALTHCHECK found it answering /healthz"
    assert siblings.client.containers.list(all=True, filters={"label": f"flower.service={scope}"}) == []
    from docker.errors import NotFound

    with pytest.raises(NotFound):  # the service's container is gone too
        siblings.client.containers.get(attrs["Id"])
    print(f"service image {service_image}: run {run_id} {done['status']} in sibling {sandbox_image}")
