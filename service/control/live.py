"""What the scheduler holds for one run it follows: one record per live run, forgotten in one place.

Temporal's worker keeps one ``_RunningActivity`` per activity in one dict; the scheduler used to keep a run's
handle, its stop task, its checkpoint flag, the stamp of the bundle it took, when it measured its folder, why it
is being stopped and the audit the run reported about itself in nine parallel containers, each cleared on its
own when the run ended (and one of them was not). Here they are one ``LiveRun``, made when a run starts (or is
re-attached) and dropped by ``LiveRuns.forget`` when it ends, whichever way it ends.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from sandbox.backends.base import Handle
from sandbox.layout import RunLayout

from ..gateway.wire import Usage
from ..registry import Lease, Run

__all__ = ["LiveRun", "LiveRuns", "StopReason", "STOP_ORDER", "layout_of", "one_line", "usage_of"]

StopReason = Literal["budget", "tenant_removed", "disk"]
"""Why the service itself stops a live run (a cancel is the tenant's, and is on the run's row)."""
STOP_ORDER: tuple[StopReason, ...] = ("budget", "tenant_removed", "disk")
"""Which reason a run's end names when it was stopped for more than one."""


def usage_of(run: Run) -> Usage:
    """The model usage the gateway metered onto the run's row."""
    return Usage(input_tokens=run.input_tokens, output_tokens=run.output_tokens,
                 cache_creation_input_tokens=run.cache_write_tokens, cache_read_input_tokens=run.cache_read_tokens,
                 cost_usd=run.cost_usd)


def layout_of(root: Path, run: Run) -> RunLayout:
    """The run's folders under the service's runs root (a warm slot's folder when it took one)."""
    return RunLayout(root, run.id, Path(run.repo).name, folder=run.folder or "")


def one_line(text: object, limit: int = 400) -> str:
    """``text`` on one line of at most ``limit`` characters: what a log field or a run's error may hold."""
    s = " ".join(str(text).split())
    return s if len(s) <= limit else s[: limit - 1] + "…"


@dataclass(eq=False)
class LiveRun:
    """One run the scheduler is starting or following."""

    id: str
    handle: Handle | None = None
    """Its sandbox, once the backend started it (or the re-attach found it)."""
    lease: Lease | None = None
    """This replica's hold on it (``Registry.take``): every write of the run carries it, and fails once another
    replica has taken the run."""
    stop_task: asyncio.Task[None] | None = None
    """The background stop, once one was asked for (a stop waits for the run; other runs must not)."""
    checkpoint_due: bool = False
    """The run said it handed back work since the bundle was last taken."""
    bundle_stamp: tuple[int, int, int] | None = None
    """(inode, size, mtime) of the work bundle last taken: the same file is not taken twice."""
    measured_at: float = 0.0
    """Monotonic time its folder was last measured."""
    stops: dict[StopReason, str] = field(default_factory=dict)
    """Why the service is stopping it, each reason with its sentence."""
    warm: bool = False
    """It claimed a warm sandbox."""
    first_request_due: bool = False
    """Started by this process, its first model request not yet seen in the row (the gateway out of process)."""
    metered: Usage | None = None
    """The run's row's model usage when last counted into the metrics (the gateway in a process of its own: its
    metering reaches this one through the row); None until first seen."""
    self_reported: Counter[str] = field(default_factory=Counter)
    """The audit kinds (tool_call, deny, spill) the run reported about itself: compared with the wire's at the end."""
    in_flight: str = ""
    """What its events say it is doing — a tool call, a model call, or between steps — to name where a loss hit."""
    checkpoint_at: float | None = None
    """When it last handed its work back (its ``checkpoint`` event): a loss costs at most what came after."""
    progressed: bool = False
    """Its sandbox got something done — a model turn or a tool call ended — since it started (or was re-attached)."""
    asking: set[str] = field(default_factory=set)
    """The ids of its questions open now (its ``ask`` events: asked, and not yet settled)."""
    waiting_since: float | None = None
    """Since when (the service's clock) it has had a question open: past the tenant's ``park_after_s`` it parks."""
    parking: bool = False
    """Its sandbox is being given back while it waits for a person (its row is ``parked`` already)."""

    @property
    def stopping(self) -> bool:
        return self.stop_task is not None


class LiveRuns:
    """The live runs by id; the one place a run's record is made and the one place it is forgotten."""

    def __init__(self) -> None:
        self._runs: dict[str, LiveRun] = {}

    def of(self, run_id: str) -> LiveRun:
        """The run's record, made now if it has none."""
        live = self._runs.get(run_id)
        if live is None:
            live = self._runs[run_id] = LiveRun(run_id)
        return live

    def get(self, run_id: str) -> LiveRun | None:
        return self._runs.get(run_id)

    def forget(self, run_id: str) -> LiveRun | None:
        """The run ended: nothing of it is kept."""
        return self._runs.pop(run_id, None)

    def handles(self) -> dict[str, Handle]:
        """run → its sandbox, for the runs that have one."""
        return {r.id: r.handle for r in self._runs.values() if r.handle is not None}

    def stop_tasks(self) -> list[asyncio.Task[None]]:
        return [r.stop_task for r in self._runs.values() if r.stop_task is not None]

    def __contains__(self, run_id: object) -> bool:
        return run_id in self._runs

    def __iter__(self) -> Iterator[LiveRun]:
        return iter(list(self._runs.values()))

    def __len__(self) -> int:
        return len(self._runs)
