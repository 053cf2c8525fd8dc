"""How a run ended, decided from what was read of it: a pure function, in the style of ``flower.core.outcome``.

The scheduler's finish is drain → ``decide`` → collect → record → release. Draining reads everything the run
left (its last events, exit.json, the backend's exit code); ``decide`` turns that into one ``Ended`` without
touching the disk, the backend or the clock, so every way a run can end is a row in a unit test's table:

* stopped by the service (over budget, its tenant removed, over its disk) — failed, the first of
  ``STOP_ORDER`` it was stopped for named;
* cancelled on request;
* what its exit.json says (a failure that says the disk was full is marked so);
* an exit.json that is not a record — failed, saying why;
* its sandbox gone without exit.json — failed, ``vanished``;
* exited without exit.json — failed, ``crashed``, with the exit code.

The last two are a lost sandbox, not a run that ended: ``lost`` says so, and the run is resumed in a new sandbox
on its own folder — unless ``give_up`` finds it lost too often (``max_resumes``) or twice the same way at the same
place, when it fails with every loss listed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from sandbox.records import ExitRecord

from ..metrics import FailureReason
from ..registry import Loss, LossCause
from .health import is_disk_full
from .live import STOP_ORDER, StopReason

__all__ = ["EndStatus", "Drained", "Ended", "decide", "claimed_cost", "lost", "give_up", "losses_text"]

EndStatus = Literal["succeeded", "failed", "aborted", "killed", "cancelled"]

_STOP_REASON: dict[StopReason, FailureReason] = {"budget": "budget", "tenant_removed": "tenant_removed",
                                                 "disk": "disk"}
_STATUS_REASON: dict[EndStatus, FailureReason] = {"failed": "failed", "aborted": "aborted", "killed": "killed"}


def claimed_cost(value: object, default: float) -> float:
    """A cost the run reports: a claim, so only a finite, non-negative number is believed."""
    import math

    if not isinstance(value, (int, float, str)):  # what JSON can hold besides: null, a list, an object
        return default
    try:
        cost = float(value)
    except ValueError:
        return default
    return cost if math.isfinite(cost) and 0 <= cost < 1e9 else default


@dataclass(frozen=True)
class Drained:
    """Everything read of a run that is ending, before anything is decided."""

    stops: Mapping[StopReason, str]
    """Why the service stopped it, if it did."""
    cancel_requested: bool
    exit: ExitRecord | None
    """Its exit.json, when it wrote one that is a record."""
    bad_exit: str | None = None
    """Why its exit.json is not a record, when it wrote one that is not."""
    missing: bool = False
    """Its sandbox is gone."""
    why_missing: str | None = None
    """The sentence for a missing sandbox, when the caller knows more (a restart found it gone)."""
    exit_code: int | None = None
    """The backend's exit code (read only when there is no exit.json and the sandbox is there)."""
    disk_was_full: bool = False
    """The data dir ran out of space while it ran (read with the exit code)."""
    claimed_cost_usd: float = 0.0
    """What its events said it cost so far."""


@dataclass(frozen=True)
class Ended:
    """How the run ended: the row's status and error, the metric's reason, and what it said it cost."""

    status: EndStatus
    error: str | None
    reason: FailureReason | None
    claimed_cost_usd: float
    disk_full: bool = False
    """It died for want of space: its error is to say so, whatever it managed to write."""


def decide(d: Drained) -> Ended:
    """The one way ``d`` ended (see the module's list, in its order)."""
    claimed = d.claimed_cost_usd
    if d.exit is not None:
        claimed = claimed_cost(d.exit.cost_usd, claimed) or claimed
    stop = next((r for r in STOP_ORDER if r in d.stops), None)
    status: EndStatus
    error: str | None
    reason: FailureReason | None = None
    disk_full = False
    if stop is not None:
        status, error, reason = "failed", d.stops[stop], _STOP_REASON[stop]
    elif d.cancel_requested:
        status, error = "cancelled", "cancelled on request"
    elif d.exit is not None:
        status, error = d.exit.status, d.exit.error or None
        disk_full = status != "succeeded" and bool(error) and is_disk_full(error or "")
    elif d.bad_exit is not None:
        status, error = "failed", d.bad_exit
    elif d.missing:
        status, error, reason = "failed", d.why_missing or "the run's sandbox disappeared without writing exit.json", \
            "vanished"
    else:
        status, reason = "failed", "crashed"
        error = f"the run exited with code {d.exit_code} without writing exit.json (it crashed before finishing)"
        disk_full = d.disk_was_full
    if reason is None:
        reason = _STATUS_REASON.get(status)
    return Ended(status, error, reason, claimed, disk_full)


def lost(d: Drained, ended: Ended) -> LossCause | None:
    """Whether ``d`` is a lost sandbox rather than a run that ended — it left no exit.json, or one saying it was
    killed when the service stopped nothing (its engine stopped it: a restart, a node drained, a pod evicted) — and
    not for want of disk (a full disk fails the run: a resume would fail the same way). Its cause, or None."""
    if d.stops or d.cancel_requested or ended.disk_full:
        return None
    if ended.reason in ("crashed", "vanished"):
        return "vanished" if d.missing else "crashed"
    if d.exit is not None and d.exit.status == "killed":
        return "killed"
    return None


def give_up(losses: Sequence[Loss], max_resumes: int) -> str | None:
    """Why a run that lost its sandbox (the last of ``losses``) is not resumed again — lost more than
    ``max_resumes`` times, or twice in a row the same way at the same place: in the same tool call of its own (the
    same command: out of memory again, a fork flood again), or anywhere with nothing done between (not a model turn,
    not a tool call) — or None to resume it."""
    if len(losses) > max_resumes:
        return f"its sandbox was lost {len(losses)} times, more than max_resumes = {max_resumes}"
    if len(losses) >= 2:
        a, b = losses[-2], losses[-1]
        if (a.cause, a.step, a.place) == (b.cause, b.step, b.place) and b.place and \
                (not b.progressed or _its_own_call(b.place)):
            return (f"its sandbox was lost twice in a row the same way ({b.cause}) at the same place "
                    f"({b.step or 'no step'}: {b.place}): resumed again it would be lost again")
    return None


def _its_own_call(place: str) -> bool:
    """A tool call the run made itself (a command, a file written) — the kind that brings its sandbox down again
    (out of memory, a fork flood) — not a wait on a person (the human channel's ``ask``)."""
    return place.startswith("tool ") and "mcp__human__" not in place


def losses_text(losses: Sequence[Loss]) -> str:
    """Every loss, numbered, in one line: the error of a run that was not resumed again."""
    return "; ".join(f"{i}) {x.cause} — {x.error}" + (f" (step {x.step}, {x.place})" if x.step or x.place else "")
                     for i, x in enumerate(losses, 1))
