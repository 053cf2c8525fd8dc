"""How a run's results reach its team: the scheduler says when a run started, asked a question and ended — one
call each, which returns at once — and this module turns that into webhooks (``service.results.webhooks``) and, for a
succeeded run, a push of its branch (``service.results.push``) before ``run.ended`` goes out saying whether it was pushed.

Pushes run in worker threads off the scheduler's pass; a failed one leaves the run succeeded, with the reason on
its row (``push``), and ``POST /v1/runs/{id}/push`` tries again. A push under way when the service stopped is
done by the next one.
"""

from __future__ import annotations

import asyncio
import functools
from collections import Counter
from collections.abc import Callable
from typing import ParamSpec

from sandbox.records import QUESTION_ID, QUESTION_MAX, Event

from ..logging import get_logger
from ..registry import Push, Run, RunsTable
from ..tenants import Tenant, Tenants
from .push import push_due, push_run
from .webhooks import QuestionBody, Webhooks

__all__ = ["Results"]

log = get_logger("flower.service.results")

PUSHES_AT_ONCE = 2
ASKED_PER_RUN = 50  # question.asked webhooks of one run at most: its ask events are its own claims, and a run
# that writes a million of them must not make the service send a million requests or keep a million rows
P = ParamSpec("P")


def _never_raises(told: Callable[P, None]) -> Callable[P, None]:
    """What the scheduler tells must not fail its pass (nor the run it was following): a failure is logged."""
    @functools.wraps(told)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> None:
        try:
            told(*args, **kwargs)
        except Exception:  # noqa: BLE001 - a webhook or push lost is logged; the run and the pass go on
            log.exception("results.failed", told=told.__name__)
    return wrapper


class Results:
    def __init__(self, runs: RunsTable, tenants: Tenants, webhooks: Webhooks) -> None:
        self.runs = runs
        self.tenants = tenants
        self.webhooks = webhooks
        self._pushing: dict[str, asyncio.Task[Push]] = {}
        self._slots = asyncio.Semaphore(PUSHES_AT_ONCE)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._asked: Counter[str] = Counter()  # run → question.asked webhooks queued this service's lifetime

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        await self.webhooks.start()
        for run in await asyncio.to_thread(self.runs.pending_pushes):
            tenant = self.tenants.get(run.tenant)
            if tenant is not None and push_due(run, tenant):
                self._push_in_background(run, tenant)

    async def stop(self) -> None:
        tasks = list(self._pushing.values())
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._pushing.clear()
        await self.webhooks.stop()

    # -- what the scheduler tells (each returns at once) ----------------------------------------------
    @_never_raises
    def started(self, run_id: str, *, resumed: bool = False) -> None:
        """``run.started`` once per run; ``run.resumed`` each time it starts again in a new sandbox."""
        run = self.runs.get(run_id)
        if run is not None:
            if resumed:  # keyed by its sandbox: each resume is sent once, across replicas too
                self.webhooks.emit("run.resumed", run, key=str(run.sandboxes))
            else:
                self.webhooks.emit("run.started", run)

    @_never_raises
    def parked(self, run_id: str) -> None:
        """It gave its sandbox back while it waits for a person."""
        run = self.runs.get(run_id)
        if run is not None:
            self.webhooks.emit("run.parked", run, key=str(run.sandboxes))

    @_never_raises
    def asked(self, run: Run, ev: Event) -> None:
        """An ``ask`` event: a new question (not its answer, not a message the person sent) is announced."""
        p = ev.payload
        qid = p.get("id")
        if p.get("state") != "asked" or p.get("kind") == "mail" or not isinstance(qid, str) \
                or not QUESTION_ID.fullmatch(qid) or self._asked[run.id] >= ASKED_PER_RUN:
            return
        self._asked[run.id] += 1
        raw = p.get("options")
        options = [o[:1000] for o in raw[:20] if isinstance(o, str)] if isinstance(raw, list) else []
        self.webhooks.emit("question.asked", run, key=qid, question=QuestionBody(
            id=qid, text=ev.text[:QUESTION_MAX], options=options))  # keyed by the question: a repeat is sent once

    @_never_raises
    def ended(self, run_id: str) -> None:
        """The run's row says how it ended: push its branch first when that is due, then announce it."""
        run = self.runs.get(run_id)
        if run is None or not run.terminal:
            return
        self._asked.pop(run_id, None)
        tenant = self.tenants.get(run.tenant)
        if run.push is None and push_due(run, tenant):
            assert tenant is not None and tenant.push is not None and run.commit_sha
            run.push = Push(state="pending", url=tenant.push.url, ref=f"refs/heads/{run.branch}",
                            commit=run.commit_sha)
            self.runs.record_push(run.id, run.push)
            self._push_in_background(run, tenant)
            return
        self.webhooks.emit("run.ended", run, push=run.push)

    # -- pushing ---------------------------------------------------------------------------------------
    def pushing(self, run_id: str) -> bool:
        return run_id in self._pushing

    async def push(self, run: Run, tenant: Tenant) -> Push:
        """Push the run's branch now (the API's retry) and store the outcome on its row."""
        task = self._pushing.get(run.id)
        if task is None:
            assert self._loop is not None
            task = self._loop.create_task(self._push(run, tenant), name=f"flower-push-{run.id}")
            self._pushing[run.id] = task
            task.add_done_callback(lambda _t: self._pushing.pop(run.id, None))
        return await asyncio.shield(task)

    def _push_in_background(self, run: Run, tenant: Tenant) -> None:
        assert self._loop is not None
        task = self._loop.create_task(self._push(run, tenant, announce=True), name=f"flower-push-{run.id}")
        self._pushing[run.id] = task
        task.add_done_callback(lambda _t: self._pushing.pop(run.id, None))

    async def _push(self, run: Run, tenant: Tenant, *, announce: bool = False) -> Push:
        async with self._slots:
            before = run.push.attempts if run.push is not None else 0
            outcome = await asyncio.to_thread(push_run, run, tenant, before, self.webhooks.clock)
        self.runs.record_push(run.id, outcome)
        run.push = outcome
        fields = {"tenant": run.tenant, "run": run.id, "url": outcome.url, "ref": outcome.ref,
                  "commit": outcome.commit, "attempts": outcome.attempts}
        if outcome.state == "pushed":
            log.info("run.pushed", **fields)
        else:
            log.warning("run.push_failed", **fields, error=outcome.error)
        if announce:
            current = self.runs.get(run.id)
            if current is not None:
                self.webhooks.emit("run.ended", current, push=outcome)
        return outcome
