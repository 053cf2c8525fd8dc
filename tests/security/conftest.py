"""The hostile-run suite runs each test on the local backend (bubblewrap) and the Docker backend (deployments and
canaries: ``_hostile.py``; ``services`` is the shared fixture of tests/conftest.py)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "service"))  # _service_helpers, for the tests


@pytest.fixture(params=["local", "docker"])
def backend_name(request: pytest.FixtureRequest) -> str:
    if request.param == "docker":
        request.getfixturevalue("docker_engine")
    else:
        import shutil

        if shutil.which("bwrap") is None:
            pytest.fail("the hostile-run suite needs bubblewrap (apt-get install bubblewrap; .ci/run does)")
    return str(request.param)
