"""``WarmPool.reap`` on the local backend (real bubblewrap sandboxes): the waiting sandboxes and slot folders of
another owner that is gone are removed; a live owner's, a folder a run claimed and the pool's own stay."""

from __future__ import annotations

from pathlib import Path

import pytest

from sandbox.backends import LocalBackend
from sandbox.pool import WarmPool
from test_sandbox_pool import shape_of


def test_a_pool_reaps_what_a_gone_owners_pool_left_and_nothing_of_a_live_ones(tmp_path: Path,
                                                                              git_workspace: Path) -> None:
    runs = tmp_path / "runs"
    backend = LocalBackend(root=runs)
    shape = shape_of(git_workspace)
    pools = {o: WarmPool(backend, runs, 1, owner=o, on_error=lambda s, e: pytest.fail(str(e)))
             for o in ("0a0a0a0a", "0b0b0b0b", "0c0c0c0c")}
    try:
        for p in pools.values():
            p.want(shape)
            assert p.fill() == 1
        claimed = runs / "warm-0b0b0b0b0123456789abcdef"  # a slot of the dead pool a run claimed: the run's now
        claimed.mkdir()
        asked: list[str] = []

        def alive(owner: str) -> bool:
            asked.append(owner)
            return owner != "0b0b0b0b"

        assert pools["0a0a0a0a"].reap(alive, keep={claimed.name}.__contains__) == 1
        assert sorted(asked) == ["0b0b0b0b", "0c0c0c0c"], "each other owner asked once, never the pool's own"
        assert sorted(f.name[:13] for f in backend.slots()) == ["warm-0a0a0a0a", "warm-0c0c0c0c"]
        assert claimed.is_dir() and not [d for d in runs.glob("warm-0b0b0b0b*") if d != claimed]
        assert WarmPool(backend, runs, 1).reap(lambda owner: False, keep=lambda folder: False) == 0, \
            "a pool without an owner is the only one on its folder: it reaps nothing"
    finally:
        for p in pools.values():
            p.close()
        for handle in [*backend.live().values(), *backend.slots().values()]:
            backend.remove(handle)
