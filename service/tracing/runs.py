"""The control plane's spans: a run, its steps and their attempts (``service.control.feed`` calls these).

Read from the run's events as the service reads them: a ``step`` event opens a step (and closes the one before),
a ``system/init`` event names the CLI session of an attempt within it, a ``retry`` event is counted on its step.
Names and order are the run's claims, nothing more: a span's times are the events' own, clamped to between the
previous one and the moment the service read them (a run cannot date a step in the future or before its start),
and its tokens and cost are not there at all — the run's span takes those from its row (the gateway's metering)
when the run ends; the model calls carry them one by one (``wire``). State lives per live run in this replica;
after a restart its trace goes on from the next event read (the run's span is always sent at its end).
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from .export import Attribute, Exporter, Span, span_id_of
from .wire import NAME_MAX, new_span_id

if TYPE_CHECKING:
    from sandbox.records import Event

    from ..registry import Run

__all__ = ["RunSpans", "MAX_RUNS", "MAX_ATTEMPTS"]

MAX_RUNS = 10_000  # runs whose open step this replica remembers (a run that ended without ``ended``: forgotten)
MAX_ATTEMPTS = 64  # attempts spanned per step; more sessions in one step are counted on it, not spanned


def _line(text: str) -> str:
    return " ".join(text.split())[:NAME_MAX]


@dataclass
class _Attempt:
    span_id: int
    session: str
    label: str
    """The step label its session began under (``工作·判定#1``: the judge's session within the work step)."""
    start: float
    end: float


@dataclass
class _Step:
    name: str
    span_id: int
    start: float
    end: float
    attempts: dict[str, _Attempt] = field(default_factory=dict)
    retries: int = 0
    sessions: int = 0


@dataclass
class _Live:
    tenant: str
    last: float
    step: _Step | None = None
    sent: set[int] = field(default_factory=set)  # the attempt span ids sent already (a session seen again)


class RunSpans:
    def __init__(self, exporter: Exporter, *, now: Callable[[], float] = time.time) -> None:
        self.exporter, self.now = exporter, now
        self._runs: OrderedDict[str, _Live] = OrderedDict()

    def saw(self, run: Run, ev: Event) -> None:
        """One event of ``run``'s, as the feed read it."""
        live = self._runs.get(run.id)
        if live is None:
            live = self._runs[run.id] = _Live(run.tenant, run.started or run.created)
            while len(self._runs) > MAX_RUNS:
                self._runs.popitem(last=False)
        now = self.now()
        at = min(max(ev.at or now, live.last), now)
        live.last = at
        if ev.kind == "step":
            self._close_step(run.id, live, at)
            live.step = _Step(_line(ev.text or ev.step) or "step", new_span_id(), at, at)
        elif live.step is None and ev.step:  # read from the middle of a step (this replica took the run over)
            live.step = _Step(_line(ev.step), new_span_id(), at, at)
        step = live.step
        if step is None:
            return
        step.end = at
        if ev.kind == "retry":
            step.retries += 1
        session = ev.payload.get("session_id")
        if not isinstance(session, str) or not session:
            return
        session = session[:NAME_MAX]
        attempt = step.attempts.get(session)
        if attempt is None and ev.kind == "system" and ev.text == "init":
            step.sessions += 1
            if len(step.attempts) < MAX_ATTEMPTS:
                span_id = span_id_of("attempt", run.id, session)
                if span_id in live.sent:  # its session came back in another step: a span of its own
                    span_id = new_span_id()
                attempt = step.attempts[session] = _Attempt(span_id, session, _line(ev.step) or step.name, at, at)
        if attempt is not None:
            attempt.end = at

    def _close_step(self, run_id: str, live: _Live, at: float) -> None:
        step, live.step = live.step, None
        if step is None:
            return
        end = max(step.end, at)
        for n, attempt in enumerate(step.attempts.values(), 1):
            live.sent.add(attempt.span_id)
            self.exporter.send(Span(live.tenant, run_id, f"attempt {n}", attempt.span_id, step.span_id,
                                    attempt.start, max(attempt.end, attempt.start), {
                                        "flower.run.id": run_id, "flower.step": step.name, "flower.attempt": n,
                                        "flower.step.label": attempt.label, "flower.session": attempt.session}))
        attributes: dict[str, Attribute] = {"flower.run.id": run_id, "flower.step": step.name,
                                            "flower.step.retries": step.retries,
                                            "flower.step.attempts": step.sessions}
        self.exporter.send(Span(live.tenant, run_id, f"step {step.name}", step.span_id, span_id_of("run", run_id),
                                step.start, end, attributes))

    def ended(self, run: Run) -> None:
        """The run's row says it ended (``run``: that row): its last step, then its own span with the gateway's
        metering of it."""
        live = self._runs.pop(run.id, None)
        end = run.ended or self.now()
        if live is not None:
            self._close_step(run.id, live, min(end, self.now()))
        attributes: dict[str, Attribute] = {
            "flower.run.id": run.id, "flower.run.status": run.status, "flower.tenant": run.tenant,
            "gen_ai.usage.input_tokens": run.input_tokens, "gen_ai.usage.output_tokens": run.output_tokens,
            "gen_ai.usage.cache_read.input_tokens": run.cache_read_tokens,
            "gen_ai.usage.cache_creation.input_tokens": run.cache_write_tokens,
            "flower.cost_usd": run.cost_usd, "flower.claimed_cost_usd": run.claimed_cost_usd,
            "flower.sandboxes": run.sandboxes}
        if run.step:
            attributes["flower.step"] = _line(run.step)
        error = None if run.status == "succeeded" else _line(run.error or run.status)[:NAME_MAX]
        self.exporter.send(Span(run.tenant, run.id, "run", span_id_of("run", run.id), None, run.created,
                                max(end, run.created), attributes, error))
