"""How a run ends, once: drain → decide → collect → record → release (``Finisher.finish``), and the ways a run
ends alone (poisoned, failed to start, its tenant removed).

Nothing of a finish is done by a replica that lost the run: the harvest (its bundle, its checkout) follows a fenced
renewal of the run's lease, everything else (metrics, ``run.finished``, the sandbox, webhooks, the push) the fenced
write of its end (``_record``). Once that write is made the run is ended, and no replica takes an ended run: what
follows it is done once.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from sandbox.backends.base import Backend, Handle
from sandbox.layout import RunLayout
from sandbox.records import RecordError, read_exit_record

from ..clock import Clock
from ..config import ServiceConfig
from ..logging import get_logger
from ..metrics import FailureReason, Metrics
from ..registry import ACTIVE, Kept, Loss, LossCause, Run, RunsTable, RunStatus
from ..results import Results
from .ending import Drained, Ended, decide, give_up, losses_text, lost
from .feed import EventFeed
from .following import Following
from .grants import Grants
from .harvest import Harvest
from .health import disk_full_reason
from .hooks import Hooks
from .live import LiveRun, layout_of, one_line
from .retention import folder_bytes

__all__ = ["Finisher"]

log = get_logger("flower.service.scheduler")


class Finisher:
    def __init__(self, config: ServiceConfig, runs: RunsTable, backend: Backend, *, following: Following,
                 grants: Grants, harvest: Harvest, feed: EventFeed, results: Results, metrics: Metrics,
                 hooks: Hooks, clock: Clock) -> None:
        self.config = config
        self.runs = runs
        self.backend = backend
        self.following = following
        self.grants = grants
        self.harvest = harvest
        self.feed = feed
        self.results = results
        self.metrics = metrics
        self.hooks = hooks
        self.clock = clock

    def layout(self, run: Run) -> RunLayout:
        return layout_of(self.config.runs_root, run)

    async def finish(self, run: Run, state: str, *, why: str | None = None) -> None:
        """The sandbox ended (``state``: how the backend saw it, or "missing"): the run's end, once."""
        if self.following.taken(run.id):
            return  # another replica holds the run now: it finishes it
        row = self.runs.get(run.id)  # read under the lease: an end written before this replica took it shows
        if row is None or row.terminal:
            self.following.let_go(run.id)
            return
        live = self.following.live.of(run.id)
        run, drained = await self._drain(run, live, state, why)
        ended = decide(drained)
        cause = lost(drained, ended)
        if cause is not None:
            gave_up = await self._resume(run, live, ended, cause)
            if gave_up is None:
                return
            ended = replace(ended, error=gave_up)
        if ended.disk_full and drained.exit is not None:  # its exit.json says the disk was full: noted
            self.following.health.disk_full_seen()
        layout = self.layout(run)
        collected = await asyncio.to_thread(self.harvest.collect, run, layout, live)
        if await self._record(run, live, ended, collected.commit, collected.stat, collected.notes):
            await self._release(run, live)

    async def _resume(self, run: Run, live: LiveRun, ended: Ended, cause: LossCause) -> str | None:
        """The run's sandbox was lost: back in line to start again on its own folder after a backoff — its token
        ended, its old sandbox removed, its lease let go (whoever starts it takes one). None when it was (or another
        replica holds it now); else why it is not resumed again, every loss listed: the error it fails with."""
        now = self.clock.now()
        since = now - min(live.checkpoint_at or run.started or now, now)
        loss = Loss(cause=cause, at=now, error=ended.error or cause, step=run.step, place=live.in_flight,
                    since_checkpoint_s=round(since, 1), progressed=live.progressed)
        losses = [*run.losses, loss]
        why = give_up(losses, self.config.max_resumes)
        held = self.following.held(run.id)
        if why is not None:
            log.warning("run.not_resumed", tenant=run.tenant, run=run.id, losses=len(losses), why=why)
            await asyncio.to_thread(held.record_losses, run.id, losses)
            return f"{why}: {losses_text(losses)}"
        # what is left of the old sandbox goes first (gone, yet processes may remain), and its token: once the row
        # says queued, any replica may start the new one
        leftover = live.handle or (Handle(run.handle) if run.handle else None)
        if leftover is not None:
            try:
                await asyncio.to_thread(self.backend.remove, leftover)
            except Exception as e:  # noqa: BLE001 - the new sandbox is started all the same
                log.warning("run.remove_failed", tenant=run.tenant, run=run.id, error=one_line(e))
        await self.grants.close(held, run.id, self.layout(run))
        delay = min(self.config.resume_backoff_s * 2 ** (len(losses) - 1), 300.0)
        if await asyncio.to_thread(held.lost, run.id, losses, not_before=now + delay,
                                   sandboxes=run.sandboxes) is None:
            if not self.following.taken(run.id):
                self.following.let_go(run.id)
            return None  # fenced, or ended meanwhile: whoever holds it decides
        self.metrics.resumed(run.tenant, cause)
        log.warning("run.lost", tenant=run.tenant, run=run.id, cause=cause, error=loss.error, step=loss.step,
                    place=loss.place, since_checkpoint_s=loss.since_checkpoint_s, loss=len(losses),
                    max_resumes=self.config.max_resumes, resume_in_s=round(delay, 1))
        self.following.leases.let_go(run.id)
        self.following.forget(run.id)
        self.hooks.wake()
        return None

    async def _drain(self, run: Run, live: LiveRun, state: str, why: str | None) -> tuple[Run, Drained]:
        """Everything the run left: its last events (however many), its exit.json, else the backend's exit code."""
        layout = self.layout(run)
        while True:
            before = run.event_offset
            run = self.feed.tail(run, layout.dir, live)
            if run.event_offset == before:
                break
        bad_exit: str | None = None
        try:
            exit_data = read_exit_record(layout.dir)
        except RecordError as e:
            exit_data, bad_exit = None, str(e)
        code, disk_was_full = None, False
        crashed = exit_data is None and bad_exit is None and state != "missing"
        if crashed and not live.stops and not run.cancel_requested:  # only a crash's sentence needs them
            if live.handle is not None:
                try:
                    code = await asyncio.to_thread(self.backend.exit_code, live.handle)
                except Exception:  # noqa: BLE001
                    code = None
            disk_was_full = self.following.health.disk_was_full(since=run.started or run.created)
        return run, Drained(stops=dict(live.stops), cancel_requested=run.cancel_requested, exit=exit_data,
                            bad_exit=bad_exit, missing=state == "missing", why_missing=why, exit_code=code,
                            disk_was_full=disk_was_full, claimed_cost_usd=run.claimed_cost_usd)

    async def _record(self, run: Run, live: LiveRun, ended: Ended, commit: str | None,
                      stat: dict[str, Any] | None, notes: list[str]) -> bool:
        """The row, then the token: if the row cannot be written (a full disk), the pass fails here and the next
        one finishes the run again, sandbox and all. False when another replica has taken the run meanwhile: it
        finishes the run, and this one lets it go untouched."""
        layout = self.layout(run)
        error = ended.error
        if ended.disk_full:
            error = disk_full_reason(self.following.health.disk(fresh=True), layout.branch if commit else None, error)
        branch = run.branch
        if ended.status == "cancelled" and run.base and commit in (None, run.base):  # nothing handed back: no branch
            await asyncio.to_thread(self.harvest.discard_workspace, run, keep_branch=False)
            branch = None
        if notes:
            error = "; ".join([e for e in [error, *notes] if e])
        used = await asyncio.to_thread(folder_bytes, layout.dir)
        if self.following.taken(run.id):
            return False  # another replica holds the run now (its token too): it finishes the run
        await self.grants.metering.ending(self.following.held(run.id), run.id, layout)
        at = self.clock.now()
        kept = Kept(commit_sha=commit, branch=branch, diffstat=stat, claimed_cost_usd=ended.claimed_cost_usd,
                    disk_bytes=used)
        if self.following.held(run.id).finish(run.id, ended.status, ended=at, error=error, kept=kept) is None:
            if not self.following.taken(run.id):
                self.following.let_go(run.id)
            return False  # fenced, or ended already: whoever wrote its end does the rest, once
        self.metrics.finished(run.tenant, ended.status, at - run.started if run.started else None, ended.reason)
        wire = await self.grants.metering.ended(run.id)
        self.feed.compare_audits(run, live, wire)
        row = self.runs.get(run.id)
        if row is not None:
            self.grants.metering.count(row, live)  # what it spent since the last pass
            self.feed.traced_end(row)
        log.info("run.finished", tenant=run.tenant, run=run.id, status=ended.status,
                 cost_usd=round(row.cost_usd, 6) if row else None,
                 claimed_cost_usd=round(ended.claimed_cost_usd, 6),
                 commit=commit, files=len(stat["files"]) if stat else None, error=error)
        return True

    async def _release(self, run: Run, live: LiveRun) -> None:
        """The sandbox goes (a run that went missing may have left processes: local, in its cgroup), then
        everything held for the run; its streams and webhooks are told; its slot is free for the next pass."""
        leftover = live.handle or (Handle(run.handle) if run.handle else None)
        if leftover is not None:
            try:
                await asyncio.to_thread(self.backend.remove, leftover)
            except Exception as e:  # noqa: BLE001
                log.warning("run.remove_failed", tenant=run.tenant, run=run.id, error=one_line(e))
        self.ended(run.id)

    def ended(self, run_id: str) -> None:
        """The one place a run that ended is forgotten: its record, its lease, its backoff and its error streak."""
        self.following.leases.let_go(run_id)
        self.following.forget(run_id)
        self.feed.publish_end(run_id)
        self.results.ended(run_id)
        self.hooks.wake()

    async def evict(self, run: Run) -> None:
        """The run's tenant left the tenants file: its token ends now (not one more model call on the tenant's
        key), and the run is stopped with the reason."""
        why = (f"tenant {run.tenant} was removed from the tenants file; the service stopped its run and ended its "
               "model gateway token")
        live = self.following.live.of(run.id)
        live.stops["tenant_removed"] = why
        await self.grants.close(self.following.held(run.id), run.id)
        log.warning("run.tenant_removed", tenant=run.tenant, run=run.id, error=why)

    async def poisoned(self, run: Run, error: BaseException) -> None:
        """Handling this run's output failed: the run ends alone — failed with the reason named, its quota, token
        and sandbox released — and the scheduler and every other run go on. Each step on its own: a step that
        fails too must not keep the others from releasing what the run holds."""
        why = (f"the service could not handle this run's output ({type(error).__name__}: {one_line(error, 300)});"
               " the run was stopped")
        log.error("run.poisoned", tenant=run.tenant, run=run.id, error=why)
        await self.end_alone(run, why, "poisoned")

    async def end_alone(self, run: Run, why: str, reason: FailureReason) -> None:
        """End a run without reading anything it wrote: row failed, token ended, sandbox and checkout removed."""
        live = self.following.live.get(run.id)
        handle = (live.handle if live is not None else None) or (Handle(run.handle) if run.handle else None)
        try:
            held = self.following.held(run.id)
            ended = await asyncio.to_thread(held.finish, run.id, "failed", ended=self.clock.now(), error=why)
        except Exception as e:  # noqa: BLE001 - the rest is released all the same; the next pass retries the row
            log.warning("run.release_failed", tenant=run.tenant, run=run.id, step="row", error=one_line(e))
        else:
            if ended is None:
                if not self.following.taken(run.id):
                    self.following.let_go(run.id)
                return  # fenced, or ended already: whoever wrote its end releases the rest, sandbox and all
            self.metrics.finished(run.tenant, "failed", self.clock.now() - run.started if run.started else None, reason)
        await self.grants.close(self.following.held(run.id), run.id)
        releases: list[tuple[str, Callable[[], object]]] = [
            ("env file", lambda: self.layout(run).env_file.unlink(missing_ok=True)),
            ("checkout", lambda: self.harvest.discard_workspace(run, keep_branch=True))]
        if handle is not None:
            releases.insert(0, ("sandbox", lambda: self.backend.remove(handle)))
        for what, release in releases:
            try:
                await asyncio.to_thread(release)
            except Exception as e:  # noqa: BLE001
                log.warning("run.release_failed", tenant=run.tenant, run=run.id, step=what, error=one_line(e))
        self.ended(run.id)

    def fail(self, run: Run, error: str, *, frm: Sequence[RunStatus] = ACTIVE) -> None:
        ended = self.following.held(run.id).finish(run.id, "failed", frm=frm, ended=self.clock.now(), error=error)
        if ended is None and self.following.taken(run.id):
            return  # its end was fenced: another replica holds the run now
        log.warning("run.failed", tenant=run.tenant, run=run.id, error=error)
        self.ended(run.id)
