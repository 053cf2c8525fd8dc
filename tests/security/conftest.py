"""The hostile-run suite's fixtures: each test on the local backend (bubblewrap) and the Docker backend, and the
services it started stopped afterwards (deployments and canaries: ``_hostile.py``)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "service"))

from _service_helpers import Service, stop_services  # noqa: E402


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
