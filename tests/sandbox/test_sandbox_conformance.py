"""Each backend proves the conformance suite in a few lines, and the suite says which capabilities it showed.
Local and Docker by real runs (real CLI, scripted model); the MemoryBackend by its handler; the Kubernetes backend
against its recorded API (tests/kubernetes/test_k8s_conformance.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from sandbox.backends import LocalBackend
from sandbox.conformance import Capability, Harness, run_backend_conformance
from sandbox.testing import MemoryBackend, asking
from sandbox.backends.memory import Runs

pytestmark = pytest.mark.cli

EVERY = {Capability.BASE, Capability.WARM}


def test_the_local_backend_under_bubblewrap_conforms(git_workspace: Path, tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    report = run_backend_conformance(Harness(lambda: LocalBackend(root=runs), repo=git_workspace, root=runs))
    assert report.shown == EVERY, report


def test_the_memory_backend_conforms(git_workspace: Path, tmp_path: Path) -> None:
    engine = Runs()  # what every instance sees: one machine's engine across restarts
    report = run_backend_conformance(Harness(lambda: MemoryBackend(asking, runs=engine), repo=git_workspace,
                                             root=tmp_path / "runs", how="in memory: its handler plays the run"))
    assert report.shown == EVERY, report


@pytest.mark.docker
def test_the_docker_backend_conforms(git_workspace: Path, tmp_path: Path, docker_engine: None) -> None:
    import uuid

    from sandbox.backends import DockerBackend
    from sandbox.image import ensure_image

    image, label = ensure_image(), {"flower.test": uuid.uuid4().hex[:12]}
    report = run_backend_conformance(Harness(lambda: DockerBackend(image, network_mode="host", labels=label),
                                             repo=git_workspace, root=tmp_path / "runs"))
    assert report.shown == EVERY, report
