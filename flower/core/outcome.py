"""What one attempt came to, and what ``Runtime.run`` does next: tagged values and a pure function.

An attempt (one CLI session) ends in exactly one ``Outcome``:

* ``Done`` — the CLI reported success;
* ``Interrupted`` — the person interrupted (``Runtime.interrupt`` or the channel's slot);
* ``HandoffDue`` — the context reached the handoff line, or the API said it overflowed;
* ``Failed`` — anything else, with the error text and its ``classify`` kind.

``what_next`` turns an outcome into a ``Move`` without touching the CLI, the clock or the
disk, so every branch of the run loop is tested in milliseconds:

* ``Finish`` — stop; ``error`` replaces the result's error when set (a diagnostic);
* ``Continue`` — the same session goes on with the person's words (not a counted attempt);
* ``HandOff`` — write the handoff from ``session_id``, then a fresh session (not counted);
* ``Retry`` — a counted retry after a backoff: ``call`` is what the next attempt sends.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from ..docs.handoff import is_overflow
from .agent import HandoffPolicy
from .resilience import ErrorKind, Resilience, classify

__all__ = [
    "Call", "Done", "Interrupted", "HandoffDue", "Failed", "Outcome", "StopCause",
    "Finish", "Continue", "HandOff", "Retry", "Move", "outcome_of", "what_next", "INTERRUPT_NOTE",
]

INTERRUPT_NOTE = (
    "\n\n[说明] 上面是人在运行途中插进来的话,请按它调整后继续。"
    "被打断时正在进行的工具调用返回 interrupted,是打断的正常副作用,不是环境故障,不用排查。"
)

StopCause = Literal["interrupt", "handoff"]
"""Why the runtime itself stopped the CLI mid-turn, when it did."""


@dataclass(frozen=True)
class Call:
    """What one attempt sends: the prompt and which session it starts from."""

    prompt: str
    resume: str | None = None
    fork: bool = False
    resume_at: str | None = None


# -- outcomes ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class Done:
    session_id: str | None


@dataclass(frozen=True)
class Interrupted:
    words: str
    session_id: str | None


@dataclass(frozen=True)
class HandoffDue:
    session_id: str
    why: str


@dataclass(frozen=True)
class Failed:
    error: str
    session_id: str | None
    kind: ErrorKind


Outcome = Done | Interrupted | HandoffDue | Failed


def outcome_of(*, ok: bool, error: str | None, errors: list[str], session_id: str | None,
               stop: StopCause | None, words: str | None, handoff: bool) -> Outcome:
    """Read one attempt's result as an outcome. ``handoff``: whether a handoff is enabled at all."""
    if stop == "interrupt":
        return Interrupted(words or "", session_id)
    if stop == "handoff" and session_id:
        return HandoffDue(session_id, error or "")
    if ok:
        return Done(session_id)
    if handoff and session_id and is_overflow(error, *errors):
        return HandoffDue(session_id, error or "")
    text = error or "unknown error"
    return Failed(text, session_id, classify(text))


# -- moves ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Finish:
    error: str | None = None


@dataclass(frozen=True)
class Continue:
    call: Call


@dataclass(frozen=True)
class HandOff:
    session_id: str
    why: str


@dataclass(frozen=True)
class Retry:
    call: Call
    attempt: int  # the number of the counted attempt that follows
    resumed: bool  # the retry continues a session rather than starting over


Move = Finish | Continue | HandOff | Retry


def what_next(outcome: Outcome, *, call: Call, attempt: int, last_session: str | None, retired: int,
              resilience: Resilience, handoff: HandoffPolicy) -> Move:
    """The run loop's one decision. ``attempt``: counted attempts so far (interrupts and handoffs are not).

    ``call`` is what the attempt that just ended sent; ``last_session`` the latest session any
    attempt of this step got; ``retired`` how many sessions were handed off already.
    """
    if isinstance(outcome, Done):
        return Finish()
    if isinstance(outcome, Interrupted):
        if not outcome.session_id:
            return Finish()
        return Continue(Call(outcome.words + INTERRUPT_NOTE, outcome.session_id))
    if isinstance(outcome, HandoffDue):
        if retired >= handoff.max_generations:
            return Finish(f"context filled {retired + 1} sessions in a row "
                          f"(max_generations={handoff.max_generations}): raise HandoffPolicy.window "
                          "if it is set too small, split the step, or turn handoff off")
        return HandOff(outcome.session_id, outcome.why)
    res = resilience
    if not res.enabled or attempt >= res.max_attempts or not res.should_retry(outcome.kind):
        return Finish()
    if last_session:
        return Retry(Call(res.resume_prompt, last_session), attempt + 1, resumed=True)
    return Retry(call, attempt + 1, resumed=False)
