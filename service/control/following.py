"""What the scheduler's parts share about the runs this replica follows: one ``LiveRun`` each, their leases, the
streaks of what keeps failing (``Backoff``, ``RepeatLog``) and the machine's health — and the few things every part
does with them: write a run through its lease, forget a run another replica took, note a failure once per streak.

Made once by ``service.wiring`` and handed to the ``Starter``, the ``Finisher``, ``Recovery`` and the
``Scheduler``: none of them holds this state itself."""

from __future__ import annotations

from typing import Any

from ..config import ServiceConfig
from ..logging import get_logger
from ..registry import HeldRun, RunsTable
from .backoff import Backoff, RepeatLog
from .health import Health, is_disk_full, is_engine_down
from .leases import Leases
from .live import LiveRuns

__all__ = ["Following", "ours"]

log = get_logger("flower.service.scheduler")


def ours(error: BaseException) -> bool:
    """An error of the machine's (engine down, disk full, the registry's database) rather than of one run's
    output: the run waits for it to pass; any other error ends that run alone."""
    import sqlite3

    from sqlalchemy.exc import DBAPIError

    return is_engine_down(error) or is_disk_full(error) or isinstance(error, (sqlite3.Error, DBAPIError))


class Following:
    def __init__(self, config: ServiceConfig, runs: RunsTable, live: LiveRuns, leases: Leases, backoff: Backoff,
                 errors: RepeatLog, health: Health) -> None:
        self.config = config
        self.runs = runs
        self.live = live
        self.leases = leases
        self.backoff = backoff
        self.errors = errors
        self.health = health

    @property
    def owner(self) -> str:
        """This replica's name on the leases of the runs it follows."""
        return self.leases.owner

    def held(self, run_id: str) -> HeldRun:
        """The writes of a run this replica follows, fenced by its lease (unfenced when it holds none)."""
        live = self.live.get(run_id)
        return self.runs.under(live.lease if live is not None else None)

    def lost(self, run_id: str) -> None:
        log.warning("run.lease_lost", run=run_id, replica=self.owner,
                    why="another replica took this run (this one stopped renewing its lease in time); it follows "
                        "the run from now on")
        self.forget(run_id)

    def taken(self, run_id: str) -> bool:
        """True when another replica holds ``run_id`` now: this one forgets it — no write, no stop, no removal."""
        if not self.leases.taken(run_id):
            return False
        self.lost(run_id)
        return True

    def let_go(self, run_id: str) -> None:
        """A run this replica holds whose row says it ended already — ended by the replica that held it before this
        one took it (read, then taken: the end came between). Its lease goes, and nothing else is done: no
        harvest, no ``run.finished``, no removal, no webhook — the replica that ended it does those."""
        self.leases.let_go(run_id)
        log.info("run.ended_elsewhere", run=run_id, replica=self.owner)
        self.forget(run_id)

    def forget(self, run_id: str) -> None:
        """Its record, its backoff and its error streak go (its lease is another's, or let go already)."""
        self.live.forget(run_id)
        self.backoff.succeeded(run_id)
        self.errors.ok(run_id)

    def failed(self, event: str, key: str, error: BaseException, **fields: Any) -> None:
        """One failure of a repeating path: noted (disk full, engine down), logged once per streak with a count."""
        if is_disk_full(error):
            self.health.disk_full_seen()
            fields["reason"] = "disk full"
        if is_engine_down(error):
            self.engine_down(error)
            fields["reason"] = "backend down"
        self.errors.error(event, key, error, **fields)

    def engine_down(self, error: BaseException) -> None:
        if self.health.backend_failed(error):
            self.backoff.failed("backend")
            log.error("backend.down", backend=self.config.backend, error=self.health.backend_error,
                      live_runs=len(self.live.handles()),
                      hint="runs are not marked failed while the engine cannot be seen; they are re-attached "
                           "when it answers again")
