"""A run in its own container: the image built here with no registry, the real CLI inside against the scripted
model on 127.0.0.1 (host networking), the worktree, workbench, run dir and mailbox mounted at the host's paths."""

from __future__ import annotations

import json
import subprocess
import time
import uuid
from pathlib import Path

import pytest

from flower.testing import ScriptedModel
from sandbox.layout import RunLayout
from sandbox.testing import (GIT_CHECKED, QUESTION, Person, prepare, read_events, starter_rules, wait_asking,
                             waiting_rules)
from sandbox.worktree import diff, import_bundle

pytestmark = [pytest.mark.docker, pytest.mark.cli]

GIT_PROBE = (f"git status --short; git log --oneline -1; echo uid=$(id -u); touch /etc/x 2>&1 | tail -1; "
             f"ls {{runs}} 2>&1 | tail -1; echo {GIT_CHECKED}")


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout


@pytest.fixture(scope="session")
def sandbox_image(docker_engine) -> str:
    """Built once per machine and tree (cached by a content tag); a fresh machine pays ~2 minutes once."""
    from sandbox.image import ensure_image

    t0 = time.monotonic()
    tag = ensure_image()
    print(f"\nsandbox image {tag} ready in {time.monotonic() - t0:.1f}s")
    return tag


@pytest.fixture
def backend(sandbox_image: str):
    import docker

    from sandbox.backends import DockerBackend

    label = uuid.uuid4().hex[:12]
    b = DockerBackend(sandbox_image, network_mode="host", labels={"flower.test": label})
    yield b
    for c in docker.from_env().containers.list(all=True, filters={"label": f"flower.test={label}"}):
        c.remove(force=True)


def test_a_scripted_run_in_a_container(backend, git_workspace: Path, tmp_path: Path) -> None:
    repo, run_id, runs = git_workspace, "docker-e2e", tmp_path / "runs"
    main_head = git(repo, "rev-parse", "HEAD")
    with ScriptedModel(starter_rules(runs / run_id / repo.name, bash=GIT_PROBE.format(runs=runs))) as model:
        layout, spec = prepare(repo, runs, run_id, model, options={"timeout_s": 60})
        t0 = time.monotonic()
        handle = backend.start(layout, spec)
        with Person(layout.mailbox, ["1"], questions=layout.questions) as person:
            code = backend.wait(handle, 180)
        took = time.monotonic() - t0
        assert code == 0, backend.logs(handle)[-3000:]
        assert model.unmatched == []
        probe = next(r["text"] for req in model.conversation for r in req.results if GIT_CHECKED in r["text"])
    c = backend.client.containers.get(handle)
    assert c.labels["flower.run"] == run_id and c.labels["flower.tenant"] == "team-a"
    assert backend.state(handle) == "exited" and backend.exit_code(handle) == 0
    assert [q["question"] for q in person.asked] == [QUESTION]

    done = json.loads(layout.exit_file.read_text())
    assert done["status"] == "succeeded" and done["exit_code"] == 0
    assert [s["step"] for s in done["steps"]] == ["确认需求", "设定目标", "工作", "工作·判定#1"]
    lines = read_events(layout)
    assert [x["text"] for x in lines if x["kind"] == "step"] == ["确认需求", "设定目标", "工作"]
    assert {"mcp__human__ask", "Agent", "Write", "Bash"} <= {x["tool"] for x in lines if x["kind"] == "tool_call"}
    denied = [x for x in lines if x["kind"] == "audit" and x["text"] == "deny"]
    assert [(x["tool"], x["payload"]["guard"]) for x in denied] == [("Write", "delegate")]

    # git works inside at the host's paths, as uid 10001, on a read-only root; no other run folder is there
    assert "?? hello.py" in probe and "uid=10001" in probe and "Read-only file system" in probe, probe
    assert run_id in probe and "Permission denied" not in probe
    # the workbench is outside the worktree, on the host, written by the container
    assert (layout.workbench / "notes" / "需求.md").is_file() and not (layout.workspace / ".flower").exists()

    assert import_bundle(repo, layout.bundle, f"flower/{run_id}", base=spec.base)
    changed = diff(repo, f"flower/{run_id}", base="main")
    assert "+++ b/hello.py" in changed and git(repo, "diff", "--name-only", "main", f"flower/{run_id}") == "hello.py\n"
    assert git(repo, "rev-parse", "HEAD") == main_head and git(repo, "status", "--porcelain") == ""
    assert sorted(p.name for p in repo.iterdir()) == [".git", "README.md"], "the main checkout is untouched"
    backend.remove(handle)
    assert backend.state(handle) == "missing"
    print(f"container run end to end: {took:.1f}s")


def test_live_finds_a_running_container_and_stop_kills_it(backend, git_workspace: Path, tmp_path: Path) -> None:
    from sandbox.backends import BackendError, DockerBackend

    repo, run_id, runs = git_workspace, "docker-stop", tmp_path / "runs"
    with ScriptedModel(waiting_rules()) as model:
        layout, spec = prepare(repo, runs, run_id, model, options={"timeout_s": 600})
        handle = backend.start(layout, spec)
        wait_asking(backend, handle, layout)
        # a restarted service re-finds it by label
        again = DockerBackend(backend.image, network_mode="host", labels=backend.labels)
        assert again.live() == {run_id: handle} and again.state(handle) == "running"
        assert again.exit_code(handle) is None
        with pytest.raises(BackendError, match="is already running in container"):
            again.start(layout, spec)
        t0 = time.monotonic()
        again.stop(handle, timeout=10)
        assert time.monotonic() - t0 < 5, "SIGTERM reached the entrypoint through tini"
    assert again.state(handle) == "exited" and again.exit_code(handle) == 143 and again.live() == {}
    done = json.loads(layout.exit_file.read_text())
    assert done["status"] == "killed" and "SIGTERM" in done["error"]
    assert [(s["step"], s["error"]) for s in done["steps"]] == [("确认需求", "killed-by-signal")]
    assert read_events(layout)[-1]["payload"] == {"subtype": "killed", "signal": "SIGTERM"}


def test_start_refuses_what_cannot_run(backend, git_workspace: Path, tmp_path: Path) -> None:
    from sandbox.backends import BackendError
    from sandbox.spec import RunSpec, write_spec

    lay = RunLayout(tmp_path / "runs", "r1", "ws").ensure()
    spec = RunSpec("r1", "t", "x")
    write_spec(lay, spec)
    with pytest.raises(BackendError, match="write the env file"):
        backend.start(lay, spec)
    lay.env_file.write_text("ANTHROPIC_API_KEY='x'\n")
    lay.workspace.mkdir()
    with pytest.raises(BackendError, match="must be a checkout made by"):
        backend.start(lay, spec)
    assert backend.live() == {}


def test_the_image_carries_the_plugin_and_runs_unprivileged_defaults(sandbox_image: str) -> None:
    import docker

    out = docker.from_env().containers.run(
        sandbox_image, entrypoint=["python", "-c", "import os, flower.core.agent as a; "
                                   "print(a.PLUGIN_DIR.is_dir(), os.getuid(), os.environ['HOME'])"],
        remove=True, network_mode="none").decode().strip()
    assert out == "True 10001 /home/flower"
