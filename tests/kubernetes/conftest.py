"""Fixtures of the Kubernetes tests: a run prepared the way the service prepares one, on a 'data volume' folder."""

from __future__ import annotations

from pathlib import Path

import pytest

from sandbox.envfile import write_env_file
from sandbox.layout import RunLayout
from sandbox.spec import RunSpec, write_spec
from sandbox.worktree import make_workspace, objects_dir

RUN_ID = "20250501-100000-abcd1234"


@pytest.fixture
def data_dir(tmp_path: Path, git_repo) -> Path:
    """What the claim is mounted at in the service's pod (``data_dir``): repos/ and runs/ live on it."""
    d = tmp_path / "data"
    git_repo(d / "repos" / "acme", "acme\n")
    return d


@pytest.fixture
def prepared(data_dir: Path) -> tuple[RunLayout, RunSpec]:
    repo = data_dir / "repos" / "acme"
    layout = RunLayout(data_dir / "runs", RUN_ID, repo.name).ensure()
    base = make_workspace(repo, layout.workspace, layout.branch)
    spec = RunSpec(RUN_ID, "acme", "make a hello program", options={"rounds": 2}, env={"FLOWER_EXTRA": "1"},
                   base=base, objects=str(objects_dir(repo)))
    write_spec(layout, spec)
    write_env_file(layout.env_file, {"ANTHROPIC_API_KEY": "sk-test-not-real", "ANTHROPIC_BASE_URL": "http://127.0.0.1:9"})
    return layout, spec
