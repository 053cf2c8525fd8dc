"""What goes over the wire, and nothing else: every request body and every response is one of these.

The OpenAPI document is generated from them, so it says exactly what a client gets. Nothing internal
(sandbox handles, event-file offsets, host paths, the tenant's repository path) is a field here.
"""

from __future__ import annotations

import time
from typing import Annotated, Any, Literal

import msgspec

from flower.cli.messages import gloss

from ..config import ServiceConfig
from ..registry import Delivery, Push, Run, RunStatus
from ..registry.short_ids import short_of
from ..registry.schedules import Fire
from ..tracing.export import trace_id_of

__all__ = ["SubmitIn", "AnswerIn", "TextIn", "SubmitOut", "RunOut", "RunList", "QuestionOut", "QuestionList",
           "AnswerOut", "MessageOut", "AcceptedOut", "ManifestOut", "HealthOut", "UsageOut", "Usage", "Budget",
           "ErrorOut", "EventMessage", "FiredBy", "DiffStat", "DiffFile", "DiffFilesOut", "Status", "run_out", "PushOut",
           "push_out", "LossOut", "DeliveryOut", "DeliveryList", "delivery_out", "MAX_ASK", "MAX_BODY", "MAX_TEXT",
           "QID_RE"]

MAX_ASK = 100_000
MAX_BODY = 1024 * 1024  # bytes of a request body the API reads (a larger one is a 413 saying so)
MAX_TEXT = 20_000
QID_RE = r"^[\w.-]{1,200}$"

Status = RunStatus  # one vocabulary: the registry's
JSON = Any  # an option's value: whatever JSON the tenant's allowed options take (checked by RunSpec)


# -- requests --------------------------------------------------------------------------------
class SubmitIn(msgspec.Struct, forbid_unknown_fields=True):
    """A new run: the ask in the tenant's words, and options among those the tenant may set."""
    ask: Annotated[str, msgspec.Meta(min_length=1, max_length=MAX_ASK)]
    options: dict[str, JSON] = {}


class AnswerIn(msgspec.Struct, forbid_unknown_fields=True):
    """The answer to one open question (its id as in the ``ask`` event and in GET …/questions)."""
    question_id: Annotated[str, msgspec.Meta(pattern=QID_RE)]
    text: Annotated[str, msgspec.Meta(max_length=MAX_TEXT)]


class TextIn(msgspec.Struct, forbid_unknown_fields=True):
    """A message to a running run, or the words an interrupt continues with."""
    text: Annotated[str, msgspec.Meta(min_length=1, max_length=MAX_TEXT)]


# -- responses -------------------------------------------------------------------------------
class SubmitOut(msgspec.Struct):
    id: str
    short: str
    status: Status
    branch: str


class DiffFile(msgspec.Struct):
    """One changed file: lines added and deleted as ``git diff --numstat`` counts them (0 and 0 when binary)."""
    path: str
    insertions: int
    deletions: int
    binary: bool = False


class DiffStat(msgspec.Struct):
    """The run's changes when it ended; ``truncated``: more files changed than are listed here."""
    files: list[DiffFile]
    insertions: int
    deletions: int
    truncated: bool = False


class DiffFilesOut(msgspec.Struct):
    """The files the run's branch changed against its base, as of ``commit`` (its last checkpoint while it is
    live). ``truncated``: more files changed than are listed (fetch the branch to see them all)."""
    branch: str
    base: str
    commit: str
    files: list[DiffFile]
    insertions: int
    deletions: int
    truncated: bool


class Usage(msgspec.Struct):
    """Model tokens a run used, as the model gateway counted them on the wire."""
    input_tokens: int
    output_tokens: int
    cache_write_tokens: int
    cache_read_tokens: int


class PushOut(msgspec.Struct):
    """The run's branch pushed to the tenant's ``push_url``: ``state`` "pending" while the push runs, then "pushed"
    (``url`` now has ``ref`` at ``commit``) or "failed" (``error`` says why; POST …/push tries again)."""
    state: Literal["pending", "pushed", "failed"]
    url: str
    ref: str
    commit: str
    error: str | None
    at: str | None
    attempts: int


class DeliveryOut(msgspec.Struct):
    """One webhook delivery: ``state`` "pending" (``next_try`` says when), "delivered" or "failed" (given up:
    ``last_error`` says why). ``last_status`` is the receiver's HTTP status on the last try (null: no answer)."""
    id: str
    event: str
    run: str
    state: Literal["pending", "delivered", "failed"]
    attempts: int
    last_status: int | None
    last_error: str | None
    next_try: str | None
    created: str
    ended: str | None


class DeliveryList(msgspec.Struct):
    deliveries: list[DeliveryOut]


class RunOut(msgspec.Struct):
    """One run as its tenant sees it. ``short`` is what a person types for it (unique among the tenant's runs;
    ``last`` names the newest, the whole ``id`` always works). Times are ISO 8601 UTC; ``events`` is how many events it has written
    (the last SSE id); ``deleted`` is set once its files were removed (the row stays as a tombstone).
    ``cost_usd`` and ``usage`` are the model gateway's figures; ``claimed_cost_usd`` is what the run reported."""
    id: str
    short: str
    status: Status
    ask: str
    options: dict[str, JSON]
    branch: str | None
    base: str | None
    commit: str | None
    created: str
    started: str | None
    ended: str | None
    cost_usd: float
    error: str | None
    step: str | None
    step_label: str | None
    """``step`` for a reader of English: the name the reference fixes, glossed (``工作·判定#1 (work, verdict 1)``)."""
    diffstat: DiffStat | None
    events: int
    cancel_requested: bool
    disk_bytes: int | None
    deleted: str | None
    usage: Usage
    claimed_cost_usd: float
    push: PushOut | None
    sandboxes: int
    """How many sandboxes it has had: more than one, it was resumed (after a loss, or woken from parked)."""
    losses: list[LossOut]
    parked_at: str | None
    """While ``status`` is "parked": since when it waits for a person with no sandbox (an answer, a message or
    an interrupt wakes it)."""
    fired_by: FiredBy | None = None
    waiting: str | None = None
    """Why a queued run has not started yet, or a starting one is not running yet (its team's environment being
    prepared), in a sentence (only ``GET /v1/runs/{id}`` says it)."""
    trace_id: str | None = None
    """The run's OpenTelemetry trace id (32 hex digits) when the service sends traces (``otlp_endpoint``): look it
    up in the tracing backend. Null when traces are off."""
    trace_url: str | None = None
    """The trace in the operator's tracing UI (``trace_link`` with the id in it); null when none is configured."""


class LossOut(msgspec.Struct):
    """A sandbox the run lost and was resumed after: ``cause`` "crashed" (exited without finishing: SIGKILL, out of
    memory), "vanished" (gone: its container or pod removed, its node lost) or "killed" (stopped by its engine or
    node, not by the service: a restart, a drain, an eviction); ``place``: what
    was in flight (a tool call, a model call, between steps); ``since_checkpoint_s``: the time from its last
    checkpoint to the loss — at most what the loss cost (its files stay: the new sandbox works on the same
    checkout)."""
    cause: str
    at: str
    error: str
    step: str | None
    place: str
    since_checkpoint_s: float | None


class FiredBy(msgspec.Struct):
    """What started a run no one submitted: a schedule's tick (``by`` "schedule", ``tick`` its time) or the
    schedule's trigger (``by`` "trigger")."""
    by: Literal["schedule", "trigger"]
    schedule: str
    tick: str


class RunList(msgspec.Struct):
    runs: list[RunOut]


class QuestionOut(msgspec.Struct):
    """An open question: answer it with POST …/answers and this ``id`` (the ``ask`` event's ``payload.id``)."""
    id: str
    question: str
    options: list[str]
    asked_at: str
    timeout_s: float | None


class QuestionList(msgspec.Struct):
    questions: list[QuestionOut]


class AnswerOut(msgspec.Struct):
    question_id: str
    accepted: bool


class MessageOut(msgspec.Struct):
    id: str
    accepted: bool


class AcceptedOut(msgspec.Struct):
    accepted: bool


class ManifestOut(msgspec.Struct):
    """The run's own account of its steps and its exit (claims of the run, passed on as it wrote them)."""
    id: str
    status: Status
    steps: list[dict[str, JSON]]
    exit: dict[str, JSON] | None


class HealthOut(msgspec.Struct, omit_defaults=True):
    """``status`` "ok", "degraded" (``reasons``: disk low, backend down — still 200), "refusing runs" (503, the
    guard canary failed: ``reason``) or "scheduler stopped" (503); ``guards`` while the canary still runs."""
    status: str
    backend: str
    reasons: list[str] | None = None
    reason: str | None = None
    guards: str | None = None


class Budget(msgspec.Struct):
    run: float | None
    day: float | None


class UsageOut(msgspec.Struct):
    """What a tenant spent on one UTC day, as the model gateway measured it, and its budgets."""
    tenant: str
    day: str
    cost_usd: float
    input_tokens: int
    output_tokens: int
    budget_usd: Budget


class EventMessage(msgspec.Struct, omit_defaults=True):
    """One server-sent event as an EventSource reads it off GET …/events: ``event`` is the event's kind (``end``
    last), ``data`` its JSON, ``id`` its number (none on ``end``, whose data is the final status)."""
    event: str
    data: str
    id: str | None = None


class ErrorOut(msgspec.Struct):
    """Every error: the HTTP status again and one sentence saying what is wrong and what to do."""
    status_code: int
    error: str
    extra: list[dict[str, JSON]] | dict[str, JSON] | None = None


def _iso(t: float | None) -> str | None:
    if t is None:
        return None
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t)) + f".{int(t % 1 * 1000):03d}Z"


def run_out(run: Run, fire: Fire | None = None, *, waiting: str | None = None,
            config: ServiceConfig | None = None) -> RunOut:
    """With ``config`` sending traces (``otlp_endpoint``), the row names the run's trace (``trace_link``: links it)."""
    trace = trace_id_of(run.id) if config is not None and config.otlp_endpoint else None
    stat = msgspec.convert(run.diffstat, DiffStat) if run.diffstat else None
    return RunOut(id=run.id, short=short_of(run.id), status=run.status, ask=run.ask, options=run.options,
                  branch=run.branch, base=run.base, commit=run.commit_sha, created=_iso(run.created) or "",
                  started=_iso(run.started), ended=_iso(run.ended), cost_usd=round(run.cost_usd, 6),
                  error=run.error, step=run.step, step_label=gloss(run.step) if run.step else None, diffstat=stat,
                  events=run.event_seq,
                  cancel_requested=run.cancel_requested, disk_bytes=run.disk_bytes, deleted=_iso(run.deleted),
                  usage=Usage(input_tokens=run.input_tokens, output_tokens=run.output_tokens,
                              cache_write_tokens=run.cache_write_tokens, cache_read_tokens=run.cache_read_tokens),
                  claimed_cost_usd=round(run.claimed_cost_usd, 6), push=push_out(run.push),
                  sandboxes=run.sandboxes, parked_at=_iso(run.parked_at),
                  losses=[LossOut(cause=x.cause, at=_iso(x.at) or "", error=x.error, step=x.step, place=x.place,
                                  since_checkpoint_s=x.since_checkpoint_s) for x in run.losses],
                  waiting=waiting, trace_id=trace,
                  trace_url=config.trace_link.replace("{trace_id}", trace) if trace and config and config.trace_link
                  else None,
                  fired_by=None if fire is None else FiredBy(by=fire.fired_by, schedule=fire.schedule,
                                                             tick=_iso(fire.tick) or ""))


def push_out(push: Push | None) -> PushOut | None:
    if push is None:
        return None
    return PushOut(state=push.state, url=push.url, ref=push.ref, commit=push.commit, error=push.error,
                   at=_iso(push.at), attempts=push.attempts)


def delivery_out(d: Delivery) -> DeliveryOut:
    return DeliveryOut(id=d.id, event=d.event, run=d.run, state=d.state, attempts=d.attempts,
                       last_status=d.last_status, last_error=d.last_error, next_try=_iso(d.next_try),
                       created=_iso(d.created) or "", ended=_iso(d.ended))
