"""BASE: what every backend does — start, state, exit_code, stop, live, remove."""

from __future__ import annotations

import os
import time

from flower.testing import ScriptedModel

from ..backends.base import Backend, Handle, read_exit
from ..layout import RunLayout
from ..runfiles import list_files
from ..testing import prepare, read_events, wait_asking
from . import Contract, Harness

__all__ = ["CONTRACTS"]


def started(h: Harness, run_id: str, model: ScriptedModel) -> tuple[Backend, Handle, RunLayout]:
    """A run prepared as the service prepares one, started, and asking its question (it talks)."""
    layout, spec = prepare(h.repo, h.root, run_id, model, options={"timeout_s": 600})
    backend = h.make()
    handle = backend.start(layout, spec)
    if h.play is not None:
        h.play(layout)
    wait_asking(backend, handle, layout, timeout=120)
    return backend, handle, layout


def contract_start_events_reattach_stop_exit(h: Harness, model: ScriptedModel) -> None:
    backend, handle, layout = started(h, "conformance-a", model)
    assert isinstance(backend, Backend), "the backend implements the Backend protocol"
    assert backend.state(handle) == "running" and backend.exit_code(handle) is None
    assert read_events(layout)[0]["text"] == "sandbox started", "events reach the run's outbox"
    again = h.make()  # a restarted service
    assert again.live().get("conformance-a") == handle, f"a fresh backend re-finds the run: {again.live()}"
    again.stop(handle, timeout=10)
    assert again.state(handle) == "exited", again.state(handle)
    assert again.exit_code(handle) == 143, again.exit_code(handle)
    done = read_exit(layout.dir)
    assert done is not None and done["status"] == "killed", done
    assert "conformance-a" not in again.live()
    again.remove(handle)
    assert again.state(handle) == "missing"


def contract_a_trapped_outbox_is_neither_followed_nor_waited_on(h: Harness, model: ScriptedModel) -> None:
    backend, handle, layout = started(h, "conformance-b", model)
    outside = h.root.parent / "conformance-outside.txt"
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


CONTRACTS: list[Contract] = [contract_start_events_reattach_stop_exit, contract_a_trapped_outbox_is_neither_followed_nor_waited_on]
