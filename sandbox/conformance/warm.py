"""WARM: a backend that starts sandboxes ahead of their runs (``WarmBackend``, ``sandbox.pool``)."""

from __future__ import annotations

from flower.testing import ScriptedModel

from ..backends.base import WarmBackend, read_exit
from ..envfile import write_env_file
from ..pool import Shape, WarmPool
from ..spec import RunSpec
from ..testing import credentials, wait_asking
from ..worktree import make_workspace, objects_dir
from . import Contract, Harness

__all__ = ["CONTRACTS"]

WAITING_FILES = {"output.log"}  # what a waiting sandbox may have written in its folder: its own output, no more


def contract_a_warm_sandbox_waits_with_nothing_then_serves_one_run(h: Harness, model: ScriptedModel) -> None:
    backend = h.make()
    assert isinstance(backend, WarmBackend), "the backend implements the WarmBackend protocol"
    pool = WarmPool(backend, h.root, 1, on_error=lambda shape, e: (_ for _ in ()).throw(e))
    try:
        shape = Shape(h.repo.name, str(objects_dir(h.repo)), "open")
        pool.want(shape)
        assert pool.fill() == 1
        (folder, handle), = backend.slots().items()
        assert folder.parent == pool.root and backend.state(handle) == "running"
        files = {p.relative_to(folder).as_posix() for p in folder.rglob("*") if not p.is_dir()}
        assert files <= WAITING_FILES, f"a waiting sandbox holds nothing of any run: {sorted(files)}"
        assert not h.make().live(), "a waiting sandbox is no run"

        slot = pool.claim(shape)
        assert slot is not None and slot.handle == handle
        layout = slot.layout(pool.root, "conformance-w")
        base = make_workspace(h.repo, layout.workspace, layout.branch)
        write_env_file(layout.env_file, credentials(model))
        spec = RunSpec("conformance-w", "team-a", "帮我做一个 hello", options={"timeout_s": 600}, base=base,
                       objects=shape.objects, egress="open")
        assert backend.claim(slot.handle, layout, spec) == handle
        if h.play is not None:
            h.play(layout)
        assert h.make().live() == {"conformance-w": handle}, "a fresh backend sees the claimed sandbox as its run"
        assert backend.slots() == {}, "a claimed sandbox waits no more"
        wait_asking(backend, handle, layout, timeout=120)
        backend.stop(handle, timeout=10)
        done = read_exit(layout.dir)
        assert done is not None and done["status"] == "killed", done
        assert "conformance-w" not in backend.live() and backend.slots() == {}
        backend.remove(handle)
        assert backend.state(handle) == "missing"
    finally:
        pool.close()


CONTRACTS: list[Contract] = [contract_a_warm_sandbox_waits_with_nothing_then_serves_one_run]
