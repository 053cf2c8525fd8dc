"""What every backend must do, as one suite a backend proves itself with in a few lines.

    from sandbox.conformance import run_backend_conformance
    run_backend_conformance(lambda: LocalBackend(root=runs), repo=repo, root=runs)

In the spirit of the SDK's session-store conformance suite: each contract is a function that raises
AssertionError with what broke. The runs are real — the real CLI against a scripted model — so a backend
passes only if a run really starts, talks, is found again by a fresh instance, stops, and ends as its exit
file says; and if a run that turned its outbox into traps (a symlink at exit.json pointing outside, a FIFO
question) cannot make the backend write outside its folder or hang.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path

from flower.testing import ScriptedModel

from .backends.base import Backend, Handle, read_exit
from .layout import RunLayout
from .runfiles import list_files
from .testing import prepare, read_events, wait_asking, waiting_rules

__all__ = ["run_backend_conformance", "CONTRACTS"]


def _start(make: Callable[[], Backend], repo: Path, root: Path, run_id: str,
           model: ScriptedModel) -> tuple[Backend, Handle, RunLayout]:
    layout, spec = prepare(repo, root, run_id, model, options={"timeout_s": 600})
    backend = make()
    handle = backend.start(layout, spec)
    wait_asking(backend, handle, layout, timeout=120)
    return backend, handle, layout


def contract_start_events_reattach_stop_exit(make: Callable[[], Backend], repo: Path, root: Path,
                                             model: ScriptedModel) -> None:
    backend, handle, layout = _start(make, repo, root, "conformance-a", model)
    assert isinstance(backend, Backend), "the backend implements the Backend protocol"
    assert backend.state(handle) == "running" and backend.exit_code(handle) is None
    assert read_events(layout)[0]["text"] == "sandbox started", "events reach the run's outbox"
    again = make()  # a restarted service
    assert again.live().get("conformance-a") == handle, f"a fresh backend re-finds the run: {again.live()}"
    again.stop(handle, timeout=10)
    assert again.state(handle) == "exited", again.state(handle)
    assert again.exit_code(handle) == 143, again.exit_code(handle)
    done = read_exit(layout.dir)
    assert done is not None and done["status"] == "killed", done
    assert "conformance-a" not in again.live()
    again.remove(handle)
    assert again.state(handle) == "missing"


def contract_a_trapped_outbox_is_neither_followed_nor_waited_on(make: Callable[[], Backend], repo: Path,
                                                                root: Path, model: ScriptedModel) -> None:
    backend, handle, layout = _start(make, repo, root, "conformance-b", model)
    outside = root.parent / "conformance-outside.txt"
    outside.write_text("untouched\n")
    (layout.outbox / "exit.json").unlink(missing_ok=True)
    (layout.outbox / "exit.json").symlink_to(outside)
    os.mkfifo(layout.questions / "trap.json")
    t0 = time.monotonic()
    assert read_exit(layout.dir) is None, "a symlinked exit.json is not read"
    assert "trap.json" not in list_files(layout.dir, "outbox/questions"), "a FIFO is not a question"
    backend.stop(handle, timeout=10)
    assert time.monotonic() - t0 < 30, "nothing waited on the FIFO"
    assert outside.read_text() == "untouched\n", "stop() wrote through the run's symlink"
    backend.remove(handle)


CONTRACTS = [contract_start_events_reattach_stop_exit, contract_a_trapped_outbox_is_neither_followed_nor_waited_on]


def run_backend_conformance(make: Callable[[], Backend], *, repo: Path, root: Path) -> None:
    """Every contract against backends ``make()`` builds (each call a fresh instance over the same runs)."""
    for contract in CONTRACTS:
        with ScriptedModel(waiting_rules()) as model:
            contract(make, Path(repo), Path(root), model)
