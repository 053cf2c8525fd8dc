"""Every backend refuses what would make a run root on the host, with a sentence that says what to do instead (the
live checks — a run's files, its /proc — are tests/security/test_run_uid.py)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from flower.testing import ScriptedModel
from sandbox.backends import LocalBackend
from sandbox.backends.base import BackendError
from sandbox.backends.kubernetes import job_manifest
from sandbox.layout import RunLayout
from sandbox.spec import RunSpec
from sandbox.testing import prepare, waiting_rules


@pytest.mark.skipif(os.getuid() != 0, reason="what a root service does")
def test_a_root_service_without_setpriv_starts_no_local_run(git_workspace: Path, tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """Without setpriv a root service's run would keep uid 0: refused, nothing started."""
    import shutil

    tools = tmp_path / "bin"
    tools.mkdir()
    for name in ("bwrap", "sh"):  # what the start needs, setpriv left out
        (tools / name).symlink_to(shutil.which(name) or name)
    runs = tmp_path / "runs"
    with ScriptedModel(waiting_rules()) as model:
        layout, spec = prepare(git_workspace, runs, "no-setpriv", model)
        monkeypatch.setenv("PATH", str(tools))
        backend = LocalBackend(root=runs)
        try:
            with pytest.raises(BackendError, match=r"setpriv.*install util-linux.*unprivileged user"):
                backend.start(layout, spec)
            assert backend.live() == {} and not layout.log.exists()
        finally:
            for handle in backend.live().values():  # a run started after all is not left behind
                backend.remove(handle)


@pytest.mark.skipif(os.getuid() != 0, reason="what a root service does")
def test_no_loader_variable_reaches_what_a_root_service_runs_as_root(git_workspace: Path, tmp_path: Path) -> None:
    """The cgroup wrapper, bubblewrap and setpriv of a root service's run are root's: ``LD_PRELOAD`` in the spec's
    environment would load a file into each (here a missing one: the loader says so in the run's output)."""
    import msgspec

    from sandbox.spec import write_spec
    from sandbox.testing import wait_asking

    runs = tmp_path / "runs"
    with ScriptedModel(waiting_rules()) as model:
        layout, spec = prepare(git_workspace, runs, "no-preload", model)
        spec = msgspec.structs.replace(spec, env={"LD_PRELOAD": str(tmp_path / "planted.so")})
        layout.spec_file.unlink()
        write_spec(layout, spec)
        backend = LocalBackend(root=runs)
        handle = backend.start(layout, spec)
        try:
            wait_asking(backend, handle, layout)  # the run is up: everything before it ran
        finally:
            backend.remove(handle)
    assert "planted.so" not in layout.log.read_text()


def test_a_docker_backend_refuses_to_run_runs_as_root() -> None:
    from sandbox.backends.docker import DockerBackend

    for user in ("0:0", "0:10001", "root"):
        with pytest.raises(BackendError, match="root on the host: pick an unprivileged uid:gid"):
            DockerBackend("flower/sandbox:none", user=user)


def test_a_kubernetes_run_never_gets_a_root_pod(tmp_path: Path) -> None:
    layout = RunLayout(tmp_path / "data" / "runs", "r1", "repo")
    args = dict(image="flower/sandbox:0.1.0", namespace="flower", claim="flower-data", data_dir=tmp_path / "data",
                objects=None, secret_name="flower-run-env-0a1b2c3d")
    with pytest.raises(BackendError, match="uid 0 .root.: run the service as an unprivileged uid"):
        job_manifest(layout, RunSpec("r1", "acme", "an ask"), uid=0, gid=0, **args)  # type: ignore[arg-type]
    pod = job_manifest(layout, RunSpec("r1", "acme", "an ask"), uid=10001, gid=10001, **args)  # type: ignore[arg-type]
    assert pod["spec"]["template"]["spec"]["securityContext"]["runAsNonRoot"] is True
