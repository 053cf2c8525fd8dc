"""A run's events, from its file to the registry, the log and the SSE streams.

``tail`` reads what the run wrote since the last pass (``events.read_new``: bounded, numbered, hostile data),
folds status, step and claimed cost into the row, logs its audit lines (labelled ``source="run"``: a claim) and
fans each event out to the run's subscribers; ``publish_end`` tells them it is over. ``compare_audits`` puts the
wire's counts (the gateway's audit, which the run cannot touch) beside the run's own at the end. With traces
configured, each event also reaches ``spans`` (the run's steps and attempts, ``service.tracing.runs``) and
``traced_end`` sends the run's own span once its row says it ended.
"""

from __future__ import annotations

import asyncio
from collections import Counter, defaultdict
from pathlib import Path
from typing import TYPE_CHECKING

from sandbox.records import QUESTION_ID, Event, decode_audit

from ..logging import get_logger
from ..metrics import Metrics
from ..registry import Run, RunsTable
from ..results import Results
from .ending import claimed_cost
from .events import END, read_new
from .live import LiveRun, one_line

if TYPE_CHECKING:
    from ..tracing.runs import RunSpans

__all__ = ["EventFeed", "Item", "SUB_QUEUE"]

SUB_QUEUE = 10_000
ASKING_MAX = 100  # open questions a run is believed to have at once (it is parked while any is open)

audit_log = get_logger("flower.audit")

Item = object
"""What a subscriber's queue holds: ``(seq, Event)``, or ``events.END`` (a sentinel object, hence no narrower type)."""


class EventFeed:
    def __init__(self, runs: RunsTable, results: Results, metrics: Metrics, spans: RunSpans | None = None) -> None:
        self.runs = runs
        self.results = results
        self.metrics = metrics
        self.spans = spans
        self._subs: dict[str, set[asyncio.Queue[Item]]] = defaultdict(set)

    # -- the run's file ----------------------------------------------------------------------
    def tail(self, run: Run, folder: Path, live: LiveRun) -> Run:
        """Read what the run wrote since the last pass; fold, log, fan out; store the offset."""
        events, offset, seq = read_new(folder, run.event_offset, run.event_seq)
        if offset == run.event_offset:
            return run
        cost, step = run.claimed_cost_usd, run.step
        for n, ev in events:
            live.in_flight = _in_flight(ev, live.in_flight)
            live.progressed = live.progressed or ev.kind in ("tool_call", "tool_result", "text", "result")
            if ev.kind == "checkpoint":
                live.checkpoint_due = True
                live.checkpoint_at = ev.at
            elif ev.kind == "tool_call":
                live.self_reported["tool_call"] += 1
            elif ev.kind == "audit":
                self._audit(run, ev, live)
            elif ev.kind == "step" and ev.text:
                step = one_line(ev.text, 200)
            elif ev.kind == "result":
                cost += claimed_cost(ev.payload.get("cost_usd"), 0.0)
            elif ev.kind == "ask":
                self.results.asked(run, ev)
                _asking(ev, live)
            if self.spans is not None:
                self.spans.saw(run, ev)
            self.publish(run.id, n, ev)
        self.runs.under(live.lease).record_progress(run.id, event_offset=offset, event_seq=seq,
                                                    claimed_cost_usd=cost, step=step)
        run.event_offset, run.event_seq, run.claimed_cost_usd, run.step = offset, seq, cost, step
        return run

    def _audit(self, run: Run, ev: Event, live: LiveRun) -> None:
        """An audit line ({"kind": "audit", "text": <deny|spill|spill_failed|isolate>, "payload": {...}})
        → one structured log line ``audit.<kind>`` with the tenant, the run and the claim's fields — ours by name
        (``sandbox.records.AuditClaim``): a run's payload keys never become log fields or keywords."""
        kind, claim = decode_audit(ev)
        if kind is None:
            audit_log.warning("audit.unrecognised", tenant=run.tenant, run=run.id, source="run",
                              claimed_kind=one_line(ev.text, 64), step=ev.step or None)
            return
        if kind in ("deny", "spill"):
            live.self_reported[kind] += 1
        self.metrics.audited(run.tenant, kind)
        level = "warning" if kind in ("deny", "spill_failed") else "info"
        said = {"meaning": guard_meaning(claim.guard, claim.role, claim.tool)} if kind == "deny" else {}
        getattr(audit_log, level)(f"audit.{kind}", tenant=run.tenant, run=run.id, source="run",
                                  step=ev.step or None, **claim.fields(), **said)

    def traced_end(self, run: Run) -> None:
        """The run's row says it ended (``run``: that row): its last step's span and its own."""
        if self.spans is not None:
            self.spans.ended(run)

    @staticmethod
    def compare_audits(run: Run, live: LiveRun, wire: Counter[str] | None) -> None:
        """The wire's counts (the gateway's) against the run's own: a run that hid (or invented) a denial shows up
        here."""
        if wire is None:
            return
        claimed = live.self_reported
        if any(wire[k] != claimed[k] for k in ("deny", "spill")) or wire["tool_call"] < claimed["tool_call"]:
            audit_log.warning("audit.mismatch", tenant=run.tenant, run=run.id,
                              wire_denials=wire["deny"], run_denials=claimed["deny"],
                              wire_spills=wire["spill"], run_spills=claimed["spill"],
                              wire_tool_calls=wire["tool_call"], run_tool_calls=claimed["tool_call"])

    # -- the SSE side ------------------------------------------------------------------------
    def subscribe(self, run_id: str) -> asyncio.Queue[Item]:
        q: asyncio.Queue[Item] = asyncio.Queue(maxsize=SUB_QUEUE)
        self._subs[run_id].add(q)
        return q

    def unsubscribe(self, run_id: str, q: asyncio.Queue[Item]) -> None:
        subs = self._subs.get(run_id)
        if subs is not None:
            subs.discard(q)
            if not subs:
                self._subs.pop(run_id, None)

    def subscribed(self) -> list[str]:
        """The runs someone is streaming."""
        return list(self._subs)

    def publish(self, run_id: str, seq: int, ev: Event) -> None:
        for q in list(self._subs.get(run_id, ())):
            try:
                q.put_nowait((seq, ev))
            except asyncio.QueueFull:  # a stalled client: it re-reads from the file when it catches up
                pass

    def publish_end(self, run_id: str) -> None:
        for q in list(self._subs.get(run_id, ())):
            try:
                q.put_nowait(END)
            except asyncio.QueueFull:
                try:
                    q.get_nowait()
                    q.put_nowait(END)
                except (asyncio.QueueEmpty, asyncio.QueueFull):
                    pass


def _in_flight(ev: Event, was: str) -> str:
    """Where a run stands after ``ev``: in a tool call (named, with what it was given), in a model call, starting a
    step or between steps — the place a loss is said to have hit (two losses at one place: not resumed again)."""
    if ev.kind == "tool_call":
        return one_line(f"tool {ev.tool}: {ev.text}", 160)
    if ev.kind == "step":
        return "step start"
    if ev.kind in ("tool_result", "prompt", "retry") or (ev.kind == "system" and ev.text == "init"):
        return "model call"  # a result goes back, a prompt is sent, a CLI session begins: the model is asked
    if ev.kind == "result":
        return "between steps"
    return was


_GUARDS = {  # what each guard's refusal means, in the log's words (its ``reason`` is the run's sentence to its model)
    "whitelist": "{role} has no {tool}, by design (not a missing setting)",
    "delegate": "the coordinator does not do the work itself: {tool} is left to a subagent it dispatches",
    "isolation": "isolation failed: {role} must run in its own git worktree, not the shared checkout",
}


def guard_meaning(guard: str | None, role: str | None, tool: str | None) -> str:
    """A denial in one English sentence, from the guard's name alone (the page says the same, service/web)."""
    template = _GUARDS.get(guard or "", "the {guard} guard refused {tool}")
    return template.format(guard=guard or "a", role=role or "the agent", tool=tool or "a tool call")


def _asking(ev: Event, live: LiveRun) -> None:
    """Its open questions, from its ``ask`` events (a claim: at worst a run gets itself parked, or not)."""
    qid, state = ev.payload.get("id"), ev.payload.get("state")
    if not isinstance(qid, str) or not QUESTION_ID.fullmatch(qid) or ev.payload.get("kind") == "mail":
        return
    if state == "asked":
        if len(live.asking) < ASKING_MAX:  # a run claiming a million open questions holds the service no more memory
            live.asking.add(qid)
    else:
        live.asking.discard(qid)
