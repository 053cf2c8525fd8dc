"""What the hostile-run and gateway suites share: each tenant's canary secret and a deployment that carries it.
(A module of its own: ``from conftest import`` would find whichever conftest another directory loaded first.)"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "service"))

from _service_helpers import Deployment  # noqa: E402

CANARY = {"acme": "canary-acme-5f1d0c9e2b", "beta": "canary-beta-7a3e41b8d6"}


def hostile_deployment(root: Path, backend: str) -> Deployment:
    extra = 'network_mode = "host"\n' if backend == "docker" else 'local_isolation = "bwrap"\n'
    dep = Deployment(root, backend=backend, extra_config=extra, max_running=4, quota=2)
    for name, repo in dep.repos.items():  # a secret in each team's repository and tenants' folders
        (repo / ".git" / "canary").write_text(CANARY[name] + "\n")
    return dep
