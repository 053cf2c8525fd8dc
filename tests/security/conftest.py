"""The hostile-run suite's deployments: two tenants, each with a canary secret, the service as an operator runs
it (``python -m service`` on 127.0.0.1), on the local backend (bubblewrap) or the Docker backend."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "service"))

from _service_helpers import Deployment, Service, stop_services  # noqa: E402

CANARY = {"acme": "canary-acme-5f1d0c9e2b", "beta": "canary-beta-7a3e41b8d6"}


@pytest.fixture(params=["local", "docker"])
def backend_name(request: pytest.FixtureRequest) -> str:
    if request.param == "docker":
        request.getfixturevalue("docker_engine")
    else:
        import shutil

        if shutil.which("bwrap") is None:
            pytest.fail("the hostile-run suite needs bubblewrap (apt-get install bubblewrap; .ci/run does)")
    return str(request.param)


@pytest.fixture
def services() -> Iterator[list[Service]]:
    started: list[Service] = []
    yield started
    stop_services(started)


def hostile_deployment(root: Path, backend: str) -> Deployment:
    extra = 'network_mode = "host"\n' if backend == "docker" else 'local_isolation = "bwrap"\n'
    dep = Deployment(root, backend=backend, extra_config=extra, max_running=4, quota=2)
    for name, repo in dep.repos.items():  # a secret in each team's repository and tenants' folders
        (repo / ".git" / "canary").write_text(CANARY[name] + "\n")
    return dep
