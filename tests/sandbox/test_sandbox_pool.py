"""WarmPool on the local backend (real bubblewrap sandboxes): a dead waiting sandbox is never handed out, a shape
no tenant has any more loses its waiting sandboxes, a slot serves one run only, and a claim that fails half-way
leaves nothing behind. The whole way — a run through the
real CLI in a claimed sandbox, through the service — is tests/security/test_warm_pool.py."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from sandbox.backends import LocalBackend
from sandbox.backends.base import BackendError
from sandbox.envfile import write_env_file
from sandbox.pool import Shape, WarmPool
from sandbox.spec import RunSpec
from sandbox.worktree import make_workspace, objects_dir


@pytest.fixture
def pool(tmp_path: Path, git_workspace: Path):
    runs = tmp_path / "runs"
    backend = LocalBackend(root=runs)
    p = WarmPool(backend, runs, 1, on_error=lambda shape, e: pytest.fail(f"a warm sandbox did not start: {e}"))
    yield p
    p.close()
    for handle in [*backend.live().values(), *backend.slots().values()]:
        backend.remove(handle)


def shape_of(repo: Path) -> Shape:
    return Shape(repo.name, str(objects_dir(repo)), "closed")


def test_a_dead_waiting_sandbox_is_replaced_and_a_gone_shape_emptied(pool: WarmPool, git_workspace: Path) -> None:
    shape = shape_of(git_workspace)
    assert pool.claim(shape) is None  # nothing waits yet: the run starts cold, and the shape is wanted now
    assert pool.fill() == 1 and pool.waiting() == {shape: 1}
    (folder, handle), = pool.backend.slots().items()
    assert folder.parent == pool.root and folder.name.startswith("warm-")
    os.kill(int(handle.split(":")[1]), signal.SIGKILL)  # it dies while it waits (OOM, someone's kill)
    deadline = time.monotonic() + 10
    while pool.backend.state(handle) == "running" and time.monotonic() < deadline:
        time.sleep(0.05)
    assert pool.claim(shape) is None, "a dead sandbox is discarded, not claimed"
    assert not folder.exists(), "its folder goes with it"
    assert pool.fill() == 1
    (fresh, _), = pool.backend.slots().items()
    assert fresh != folder
    pool.retain(set())  # its tenant left the tenants file: what waited for it goes
    assert pool.backend.slots() == {} and not fresh.exists() and pool.fill() == 0


def test_a_fill_yields_to_what_is_starting_and_a_later_one_tops_the_pool_up(tmp_path: Path,
                                                                            git_workspace: Path) -> None:
    """``fill(yield_to=)`` is asked before each start: while it says runs are starting, no sandbox is."""
    runs = tmp_path / "runs"
    backend = LocalBackend(root=runs)
    pool = WarmPool(backend, runs, 3, on_error=lambda shape, e: pytest.fail(f"a warm sandbox did not start: {e}"))
    shape = shape_of(git_workspace)
    pool.want(shape)
    try:
        assert pool.fill(yield_to=lambda: True) == 0 and pool.waiting() == {shape: 0}
        asked: list[int] = []
        assert pool.fill(yield_to=lambda: asked.append(1) or len(asked) > 1) == 1  # a burst begins after one start
        assert pool.waiting() == {shape: 1}
        assert len(backend.slots()) == 1, _why_not_waiting(pool, backend, shape)
        assert pool.fill(yield_to=lambda: False) == 2 and pool.waiting() == {shape: 3}
    finally:
        pool.close()
        for handle in [*backend.live().values(), *backend.slots().values()]:
            backend.remove(handle)


def _why_not_waiting(pool: WarmPool, backend: LocalBackend, shape: Shape) -> str:
    """What became of the pool's sandboxes the backend does not see waiting: state, exit code, the end of its log —
    so that a failure on a loaded machine names its cause (issue 35: once, in 1,673 tests beside another job)."""
    said = []
    for slot in pool._slots.get(shape, []):
        log = pool.root / slot.folder / "output.log"
        tail = log.read_text(errors="replace")[-1500:] if log.is_file() else "(no log)"
        said.append(f"{slot.folder}: {backend.state(slot.handle)}, exit {backend.exit_code(slot.handle)}: {tail}")
    return "; ".join(said) or "the pool holds no slot"


def test_a_slot_serves_one_run_and_a_failed_claim_leaves_nothing(pool: WarmPool, git_workspace: Path) -> None:
    shape = shape_of(git_workspace)
    pool.want(shape)
    pool.fill()
    slot = pool.claim(shape)
    assert slot is not None and pool.waiting() == {shape: 0}
    layout = slot.layout(pool.root, "run-1")
    assert layout.dir == pool.root / slot.folder and layout.branch == "flower/run-1"
    spec = RunSpec("run-1", "team", "x", egress="closed")
    with pytest.raises(BackendError, match="env file"):  # refused before anything is handed over
        pool.backend.claim(slot.handle, layout, spec)
    assert not layout.spec_file.exists()
    make_workspace(git_workspace, layout.workspace, layout.branch)
    write_env_file(layout.env_file, {"ANTHROPIC_API_KEY": "flower-run-test"})
    assert pool.backend.claim(slot.handle, layout, spec) == slot.handle
    assert pool.backend.live() == {"run-1": slot.handle}, "a claimed sandbox is its run's"
    with pytest.raises(BackendError, match="already claimed"):
        pool.backend.claim(slot.handle, slot.layout(pool.root, "run-2"), RunSpec("run-2", "team", "y"))
    pool.discard(slot)  # what the service does when a claim fails half-way
    assert not layout.dir.exists() and pool.backend.live() == {} and pool.backend.slots() == {}


def test_a_pool_sweeps_only_what_its_owner_left(tmp_path: Path, git_workspace: Path) -> None:
    """Two replicas' pools on one runs folder (issue 23): one starting again removes its own leftovers only — the
    other's waiting sandbox stays and is still claimed."""
    runs = tmp_path / "runs"
    backend = LocalBackend(root=runs)
    shape = shape_of(git_workspace)
    mine, theirs = (WarmPool(backend, runs, 1, owner=o, on_error=lambda s, e: pytest.fail(str(e)))
                    for o in ("0a0a0a0a", "0b0b0b0b"))
    try:
        for p in (mine, theirs):
            p.want(shape)
            assert p.fill() == 1
        (left, _), = [(f, h) for f, h in backend.slots().items() if f.name.startswith("warm-0a0a0a0a")]
        again = WarmPool(backend, runs, 1, owner="0a0a0a0a")  # replica "a" started again: its old pool is gone
        assert again.sweep(keep=lambda folder: False) == 1
        assert not left.exists() and [f.name[:13] for f in backend.slots()] == ["warm-0b0b0b0b"]
        slot = theirs.claim(shape)
        assert slot is not None and backend.state(slot.handle) == "running", "the other replica's slot survived"
        theirs.discard(slot)
    finally:
        for p in (mine, theirs):
            p.close()
        for handle in [*backend.live().values(), *backend.slots().values()]:
            backend.remove(handle)
    with pytest.raises(ValueError, match="hex digits"):
        WarmPool(backend, runs, 1, owner="../x")
