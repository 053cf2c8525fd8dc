"""WARM: a backend that starts sandboxes ahead of their runs (``WarmBackend``, ``sandbox.pool``)."""

from __future__ import annotations

import hashlib
import os
import subprocess
from pathlib import Path

from flower.testing import ScriptedModel

from ..backends.base import WarmBackend, read_exit
from ..envfile import write_env_file
from ..pool import Shape, WarmPool
from ..spec import RunSpec
from ..testing import credentials, read_events, wait_asking
from ..worktree import AHEAD_BRANCH, GIT_ENV, make_workspace, objects_dir
from . import Contract, Harness

__all__ = ["CONTRACTS"]

WAITING_FILES = {"output.log"}  # what a waiting sandbox may have written in its folder: its own output, no more
# and its checkout of the repository's HEAD (``checkout_ahead``): the tree's files, and a git dir of nothing but
# git's own bookkeeping — no object of its own (its objects are the repository's, borrowed read-only)
CHECKOUT_GIT = ("HEAD", "ORIG_HEAD", "config", "description", "index", "logs/", "refs/", "objects/info/alternates")


def _blob(path: Path) -> str:
    data = os.readlink(path).encode() if path.is_symlink() else path.read_bytes()
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def _not_the_checkout(repo: Path, checkout: Path, objects: str) -> list[str]:
    """What ``checkout`` holds beyond an exact checkout of ``repo``'s HEAD on the slot's own branch."""
    out = subprocess.run(["git", "-C", str(repo), "ls-tree", "-r", "-z", "HEAD"], capture_output=True, check=True,
                         env={**os.environ, **GIT_ENV}).stdout.decode()
    tree = {}
    for row in filter(None, out.split("\0")):
        meta, name = row.split("\t", 1)
        tree[name] = meta.split()[2]
    extra = []
    for p in sorted(checkout.rglob("*")):
        if p.is_dir() and not p.is_symlink():
            continue
        rel = p.relative_to(checkout).as_posix()
        if rel.startswith(".git/"):
            if not rel.removeprefix(".git/").startswith(CHECKOUT_GIT):
                extra.append(rel)
        elif tree.get(rel) != _blob(p):
            extra.append(rel)  # a file HEAD does not hold, or holds with other bytes
    git = checkout / ".git"
    if (git / "HEAD").read_text().strip() != f"ref: refs/heads/{AHEAD_BRANCH}":
        extra.append(".git/HEAD (not the slot's branch)")
    if (git / "objects" / "info" / "alternates").read_text().strip() != objects:
        extra.append(".git/objects/info/alternates (not the repository's objects)")
    return extra


def contract_a_warm_sandbox_waits_with_nothing_then_serves_one_run(h: Harness, model: ScriptedModel) -> None:
    backend = h.make()
    assert isinstance(backend, WarmBackend), "the backend implements the WarmBackend protocol"
    pool = WarmPool(backend, h.root, 1, on_error=lambda shape, e: (_ for _ in ()).throw(e))
    claimed = None
    try:
        shape = Shape(h.repo.name, str(objects_dir(h.repo)), "open")
        pool.want(shape)
        assert pool.fill() == 1
        (folder, handle), = backend.slots().items()
        assert folder.parent == pool.root and backend.state(handle) == "running"
        checkout = folder / shape.repo_name
        files = {p.relative_to(folder).as_posix() for p in folder.rglob("*") if not p.is_dir()}
        others = {f for f in files if not f.startswith(f"{shape.repo_name}/")}
        assert others <= WAITING_FILES, f"a waiting sandbox holds nothing of any run: {sorted(others)}"
        assert (checkout / ".git").is_dir(), "a waiting sandbox holds a checkout of the repository's HEAD"
        extra = _not_the_checkout(h.repo, checkout, shape.objects)
        assert extra == [], f"a waiting sandbox's checkout is the repository's HEAD and nothing else: {extra}"
        assert not h.make().live(), "a waiting sandbox is no run"

        slot = pool.claim(shape)
        assert slot is not None and slot.handle == handle
        claimed = handle  # the pool's no more: a contract that fails from here removes it itself
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
        events = [e["payload"] for e in read_events(layout)] if layout.events.is_file() else []
        started = [p for p in events if p.get("subtype") == "sandbox"]
        if started:  # the runner's own (a harness that plays the run writes none): its CLI was started ahead, and
            # the run's env file names the model itself, not the bridge that CLI was started for: a CLI of its own
            assert started[0].get("prespawned") is True, started
            prespawn = [p for p in events if p.get("subtype") == "prespawn"]
            assert prespawn[:1] and prespawn[0]["taken"] is False, prespawn
            assert "ANTHROPIC_BASE_URL" in prespawn[0]["why"], prespawn
        backend.stop(handle, timeout=10)
        done = read_exit(layout.dir)
        assert done is not None and done["status"] == "killed", done
        assert "conformance-w" not in backend.live() and backend.slots() == {}
        backend.remove(handle)
        assert backend.state(handle) == "missing"
        claimed = None
    finally:
        if claimed is not None and backend.state(claimed) != "missing":
            backend.remove(claimed)
        pool.close()


CONTRACTS: list[Contract] = [contract_a_warm_sandbox_waits_with_nothing_then_serves_one_run]
