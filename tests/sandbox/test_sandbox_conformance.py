"""Each backend proves the conformance suite in a few lines (real runs, real CLI, scripted model)."""

from __future__ import annotations

from pathlib import Path

import pytest

from sandbox.backends import LocalBackend
from sandbox.conformance import run_backend_conformance

pytestmark = pytest.mark.cli


def test_the_local_backend_under_bubblewrap_conforms(git_workspace: Path, tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    run_backend_conformance(lambda: LocalBackend(root=runs), repo=git_workspace, root=runs)


@pytest.mark.docker
def test_the_docker_backend_conforms(git_workspace: Path, tmp_path: Path, docker_engine: None) -> None:
    import uuid

    from sandbox.backends import DockerBackend
    from sandbox.image import ensure_image

    image, label = ensure_image(), {"flower.test": uuid.uuid4().hex[:12]}
    run_backend_conformance(lambda: DockerBackend(image, network_mode="host", labels=label),
                            repo=git_workspace, root=tmp_path / "runs")
