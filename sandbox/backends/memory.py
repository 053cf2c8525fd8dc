"""MemoryBackend: runs that are records in memory — the seam's test double, as httpx's ``MockTransport`` is its.

Nothing is sandboxed and nothing runs: a *handler* plays the run. It is handed a ``MemoryRun`` and writes what the
real entrypoint would — events into the run's outbox (the same ``EventLog``), questions, its work, ``exit.json``
— either at ``start`` (a handler that finishes at once) or step by step: a handler may be a generator, and each
``advance(handle)`` runs it to its next ``yield``. The run is "running" until its exit is written or it is stopped.

``fail_next(BackendUnavailable(...))`` makes the next call raise, for the scheduler's engine-down paths. A fresh
``MemoryBackend`` over the same ``Runs`` (``MemoryBackend(runs=old.runs)``) is a restarted service's backend: it
re-finds the live runs, as a real backend does by its labels.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Generator, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..layout import RunLayout
from ..spec import Egress, Prepared, RunSpec
from .base import Handle, State, check_spec, claim_slot, claimed_run

__all__ = ["MemoryBackend", "MemoryRun", "Handler", "Runs"]


@dataclass
class MemoryRun:
    """One run as a handler plays it."""

    handle: Handle
    layout: RunLayout
    spec: RunSpec | None  # None while a warm slot waits
    exit_code: int | None = None
    log: Any = None  # sandbox.entrypoint.EventLog, opened at start
    steps: Iterator[None] | None = None

    @property
    def running(self) -> bool:
        return self.exit_code is None

    def event(self, kind: str, text: str = "", tool: str = "", payload: dict[str, Any] | None = None) -> None:
        """One line of the run's events.jsonl, as the entrypoint writes it."""
        self.log.write(kind, text, tool, payload)

    def exit(self, status: str = "succeeded", *, error: str | None = None, cost_usd: float = 0.0) -> None:
        """exit.json, written whole as the entrypoint does, and the process's exit code."""
        from ..entrypoint import EXIT_CODES, write_exit

        write_exit(self.layout.exit_file, status, error=error, cost_usd=cost_usd)
        self.exit_code = EXIT_CODES[status]
        self.log.close()


Handler = Callable[[MemoryRun], "Generator[None, None, None] | None"]


@dataclass
class Runs:
    """What a MemoryBackend holds; shared by instances that stand for one machine's engine across restarts."""

    by_handle: dict[Handle, MemoryRun] = field(default_factory=dict)
    counter: Iterator[int] = field(default_factory=lambda: itertools.count(1))


class MemoryBackend:
    """A Backend and WarmBackend whose runs are played by ``handler`` (default: succeed at once)."""

    def __init__(self, handler: Handler | None = None, *, runs: Runs | None = None) -> None:
        self.handler = handler or (lambda run: run.exit("succeeded"))
        self.runs = runs or Runs()
        self.calls: list[str] = []  # every method called, in order: what a test checks the scheduler asked for
        self._fail: list[tuple[Handle | None, BaseException]] = []

    # -- test controls -------------------------------------------------------------------------
    def fail_next(self, error: BaseException, times: int = 1, *, handle: Handle | None = None) -> None:
        """The next ``times`` calls raise ``error`` (an engine that is down, an API outage) — only the calls about
        ``handle`` when it is given (one run's sandbox gone strange)."""
        self._fail += [(handle, error)] * times

    def advance(self, handle: Handle) -> bool:
        """Run the handler of ``handle`` to its next ``yield``; False once it has no more steps."""
        run = self.runs.by_handle[handle]
        if run.steps is None:
            return False
        try:
            next(run.steps)
            return True
        except StopIteration:
            run.steps = None
            return False

    def run_of(self, run_id: str) -> MemoryRun:
        return next(r for r in self.runs.by_handle.values() if r.spec is not None and r.spec.run_id == run_id)

    def _call(self, name: str, handle: Handle | None = None) -> None:
        self.calls.append(name)
        for i, (about, error) in enumerate(self._fail):
            if about is None or about == handle:
                del self._fail[i]
                raise error

    def _play(self, run: MemoryRun) -> None:
        from ..entrypoint import EventLog

        run.log = EventLog(run.layout.events)
        run.event("system", "sandbox started", payload={"memory": True})
        played = self.handler(run)
        if isinstance(played, Generator):
            run.steps = played
            self.advance(run.handle)

    # -- Backend -----------------------------------------------------------------------------
    def start(self, layout: RunLayout, spec: RunSpec, *, network: str | None = None) -> Handle:
        self._call("start")
        check_spec(layout, spec)
        layout.exit_file.unlink(missing_ok=True)
        handle = Handle(f"memory:{next(self.runs.counter)}:{layout.dir}")
        run = MemoryRun(handle, layout, spec)
        self.runs.by_handle[handle] = run
        self._play(run)
        return handle

    def state(self, handle: Handle) -> State:
        self._call("state", handle)
        run = self.runs.by_handle.get(handle)
        return "missing" if run is None else "running" if run.running else "exited"

    def exit_code(self, handle: Handle) -> int | None:
        self._call("exit_code", handle)
        run = self.runs.by_handle.get(handle)
        return None if run is None else run.exit_code

    def stop(self, handle: Handle, timeout: float = 10) -> None:
        from .base import stopped_exit

        self._call("stop", handle)
        run = self.runs.by_handle.get(handle)
        if run is None or not run.running:
            return
        run.steps = None
        if run.spec is not None:
            stopped_exit(run.layout.dir, timeout)
        run.exit_code = 143
        if run.log is not None:
            run.log.close()

    def live(self) -> dict[str, Handle]:
        self._call("live")
        return {r.spec.run_id: h for h, r in self.runs.by_handle.items() if r.running and r.spec is not None}

    def remove(self, handle: Handle) -> None:
        self._call("remove", handle)
        run = self.runs.by_handle.pop(handle, None)
        if run is not None and run.running:
            run.exit_code = 137

    def mail_owner(self) -> tuple[int, int] | None:
        return None

    # -- WarmBackend -------------------------------------------------------------------------
    def warm(self, layout: RunLayout, *, objects: Path | None, egress: Egress,
             settings: Mapping[str, str] | None = None, environment: Prepared | None = None) -> Handle:
        self._call("warm")
        layout.ensure()
        handle = Handle(f"memory:{next(self.runs.counter)}:{layout.dir}")
        self.runs.by_handle[handle] = MemoryRun(handle, layout, None)
        return handle

    def claim(self, handle: Handle, layout: RunLayout, spec: RunSpec) -> Handle:
        self._call("claim", handle)
        run = self.runs.by_handle.get(handle)
        if run is None or not run.running:
            from .base import BackendError

            raise BackendError(f"the warm sandbox {handle} is not waiting any more")
        claim_slot(layout, spec, None)
        run.layout, run.spec = layout, spec
        self._play(run)
        return handle

    def slots(self) -> dict[Path, Handle]:
        self._call("slots")
        return {r.layout.dir: h for h, r in self.runs.by_handle.items()
                if r.spec is None and r.running and claimed_run(r.layout.dir) is None}
