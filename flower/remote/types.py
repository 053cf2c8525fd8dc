"""What the service's API answers, as the client reads it: lenient structs (unknown fields are ignored)."""

from __future__ import annotations

from typing import Any

import msgspec

TERMINAL = ("succeeded", "failed", "aborted", "killed", "cancelled")
"""Statuses of a run that has ended (nothing more will happen to it)."""


class FileChange(msgspec.Struct):
    path: str
    insertions: int = 0
    deletions: int = 0
    binary: bool = False


class Diffstat(msgspec.Struct):
    files: list[FileChange] = []
    insertions: int = 0
    deletions: int = 0
    truncated: bool = False


class DiffFiles(msgspec.Struct):
    """``GET /v1/runs/{id}/diff/files``: the files the run's branch changed, as of ``commit``."""

    branch: str
    commit: str
    files: list[FileChange] = []
    insertions: int = 0
    deletions: int = 0
    truncated: bool = False


class Loss(msgspec.Struct):
    """A sandbox the run lost and was resumed after (``RunInfo.losses``)."""

    cause: str
    at: str = ""
    error: str = ""
    step: str | None = None
    place: str = ""
    since_checkpoint_s: float | None = None


class FiredBy(msgspec.Struct):
    """What started a run no one submitted: a schedule's tick (``by`` "schedule") or its trigger ("trigger")."""

    by: str
    schedule: str
    tick: str = ""


class RunInfo(msgspec.Struct):
    """One run as ``GET /v1/runs/{id}`` shows it; ``short`` is what a person types for it (empty from an older
    service); ``parked``: it waits for a person with no sandbox (an answer, a message or an interrupt wakes it);
    ``sandboxes`` above 1: it was resumed (``losses``: the sandboxes it lost)."""

    id: str
    status: str
    short: str = ""
    ask: str = ""
    options: dict[str, Any] = {}
    branch: str | None = None
    base: str | None = None
    commit: str | None = None
    created: str | None = None
    started: str | None = None
    ended: str | None = None
    cost_usd: float = 0.0
    error: str | None = None
    step: str | None = None
    diffstat: Diffstat | None = None
    events: int = 0
    cancel_requested: bool = False
    sandboxes: int = 0
    losses: list[Loss] = []
    parked_at: str | None = None
    deleted: str | None = None
    waiting: str | None = None
    fired_by: FiredBy | None = None

    @property
    def ended_already(self) -> bool:
        return self.status in TERMINAL


class Question(msgspec.Struct):
    """An open question of a run; ``id`` is what ``POST /answers`` takes."""

    id: str
    question: str = ""
    options: list[str] = []
    asked_at: str | None = None
    timeout_s: float | None = None


class StreamEvent(msgspec.Struct):
    """One line of a run's event stream (a flower ``Event``, an audit line or a checkpoint), numbered ``seq``."""

    seq: int
    kind: str
    text: str = ""
    tool: str = ""
    payload: dict[str, Any] = {}
    step: str = ""
    at: float = 0.0


class StreamEnd(msgspec.Struct):
    """The stream's last message: the run has ended with ``status`` after ``events`` events."""

    status: str
    events: int = 0
