"""Shared fixtures. Tests that need Docker fail instead of skipping when FLOWER_REQUIRE_DOCKER=1; tests that need
PostgreSQL (``_postgres``) likewise when FLOWER_REQUIRE_POSTGRES=1."""

from __future__ import annotations

import hashlib
import os
import subprocess
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

from _postgres import postgres_empty_url, postgres_server, postgres_url  # noqa: F401  (fixtures)
from _registries import npm_registry, package_index  # noqa: F401  (fixtures: one server each per session)
from flower.core.credentials import LOOKUP_VARS
from flower.testing import Rule, ScriptedModel


# Under pytest-xdist (scripts/test runs four workers) a module's tests stay on one worker, in order, as they were
# written to run. These modules share more than a module: they read or remove what any of them leaves on the one
# Docker engine (tenants' prepared images, setup and waiting sandboxes by a label every service uses), or run a
# dockerd of their own on one data root; each family runs on one worker, one module after another.
_SHARED = {
    "engine-environments": ("service/test_environment_service.py", "service/test_team_environments.py",
                            "service/test_web_page.py", "docker/test_environment.py",
                            "kubernetes/test_k8s_environment.py", "security/test_warm_pool.py",
                            "security/test_warm_pool_replicas.py"),
    "own-dockerd": ("faults/test_engine_away.py", "faults/test_engine_killed.py"),
}
_GROUP = {module: group for group, modules in _SHARED.items() for module in modules}
# The slowest go first, so that no worker starts one of them when the others are nearly done.
_FIRST = ("engine-environments", "own-dockerd", "security/test_hostile_runs.py", "faults/test_replicas.py",
          "service/test_webhooks_fair.py", "docker/test_service_image.py", "faults/test_kill_under_load.py",
          "security/test_gateway.py", "service/test_remote_cli.py", "service/test_resume.py")


def _group(nodeid: str) -> str:
    """The unit a worker is handed: the test's module, or the family it shares an engine's things with."""
    module = nodeid.split("::", 1)[0].removeprefix("tests/")
    return _GROUP.get(module, module)


def pytest_sessionstart(session: pytest.Session) -> None:
    """The run image, made once before any worker starts (xdist's controller, or the one process): every service a
    test starts on the Docker backend asks for it, and one made meanwhile by another worker would hold that service's
    start past its test's patience. Without an engine nothing is made (the Docker tests say so themselves)."""
    paths = [a.split("::")[0] for a in session.config.args]
    if hasattr(session.config, "workerinput") or all(p.startswith("tests/unit") for p in paths) \
            or not docker_available():
        return  # a worker, or the unit tests alone (no image in them), or no engine
    from sandbox.image import ImageError, ensure_image

    try:
        ensure_image("sandbox")
    except ImageError as e:  # the tests that need it fail with it; the others run
        print(f"\nthe sandbox image could not be made: {e}")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    first = {name: i for i, name in enumerate(_FIRST)}
    items.sort(key=lambda item: first.get(_group(item.nodeid), len(first)))  # stable: the rest keep their order


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """xdist's ``loadgroup`` marks a test by rewriting its node id, which pytest 9 no longer reads: the grouping
    is this scheduler's instead (``loadscope``'s, its unit ``_group``)."""
    from xdist.scheduler import LoadScopeScheduling

    class Families(LoadScopeScheduling):
        def schedule(self) -> None:
            self.config.option.loadscopereorder = False  # ours is the order: the slowest first (_FIRST)
            super().schedule()

        def _split_scope(self, nodeid: str) -> str:
            return _group(nodeid)

    return Families(config, log)


def docker_available() -> bool:
    try:
        return subprocess.run(["docker", "info"], capture_output=True, timeout=20).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


@pytest.fixture(scope="session")
def docker_engine() -> None:
    if docker_available():
        return
    if os.environ.get("FLOWER_REQUIRE_DOCKER") == "1":
        pytest.fail("FLOWER_REQUIRE_DOCKER=1 but no Docker engine answers `docker info`")
    pytest.skip("no Docker engine (set FLOWER_REQUIRE_DOCKER=1 to make this a failure)")


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    ws.mkdir()
    return ws


def make_git_repo(path: Path, readme: str = "scratch repo\n") -> Path:
    """A real repository with one commit, as a team's repo would be."""
    path.mkdir(parents=True, exist_ok=True)
    run = lambda *a: subprocess.run(["git", *a], cwd=path, check=True, capture_output=True)  # noqa: E731
    run("init", "-q", "-b", "main")
    run("config", "user.email", "test@flower.invalid")
    run("config", "user.name", "flower test")
    (path / "README.md").write_text(readme)
    run("add", ".")
    run("commit", "-qm", "init")
    return path


@pytest.fixture
def git_workspace(workspace: Path) -> Path:
    return make_git_repo(workspace)


@pytest.fixture
def git_repo() -> Callable[..., Path]:
    """`git_repo(path, readme)` makes a real repository with one commit."""
    return make_git_repo


def _tree_hash(*roots: Path) -> str:
    h = hashlib.sha256()
    for root in roots:
        for p in sorted(root.rglob("*")):
            st = p.lstat()
            h.update(f"{p}|{st.st_mode}|{st.st_size}|{st.st_mtime_ns}\n".encode())
            if p.is_file():
                h.update(p.read_bytes())
    return h.hexdigest()


@pytest.fixture
def tree_hash() -> Callable[..., str]:
    """Hash of whole trees, modes, sizes and mtimes included: "writes nothing" made checkable."""
    return _tree_hash


@pytest.fixture(autouse=True)
def _no_host_credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    """A developer's real key must never reach a test run, nor change its outcome."""
    for key in LOOKUP_VARS:
        monkeypatch.setenv(key, "")  # recorded, so whatever a test loads is undone after it
        monkeypatch.delenv(key)


@pytest.fixture
def scripted(monkeypatch: pytest.MonkeyPatch):
    """`with scripted(rules) as model:` — credentials and base URL set as a user would set them,
    so a Runtime (and the real CLI it starts) built inside talks to the scripted model."""

    @contextmanager
    def start(rules: list[Rule], **kw) -> Iterator[ScriptedModel]:
        with ScriptedModel(rules, **kw) as model:
            for key, value in model.env.items():
                monkeypatch.setenv(key, value)
            yield model

    return start


@pytest.fixture
def services() -> Iterator[list[Any]]:
    """Services (``_service_helpers.Service``) a test started are stopped after it, and every run sandbox they
    left is ended."""
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parent / "service"))
    from _service_helpers import stop_services

    started: list[Any] = []
    yield started
    stop_services(started)
