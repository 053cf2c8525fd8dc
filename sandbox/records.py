"""What a run writes, decoded: typed records with known fields and bounded sizes.

A run's outbox is the run's, so every record in it is a claim by an attacker (DESIGN.md, "where trust ends"). The
service reads them only through these types: fields it does not know are dropped, strings are cut to a bound, a
value of the wrong type makes the record invalid (``RecordError``) instead of reaching our code as something else.
No run-written name ever becomes one of our keys, keyword arguments or log field names — the worst a run can do
with its records is describe itself wrongly.

    Event        one line of outbox/events.jsonl (``decode_event``; a line that is not one is ``unparsed``)
    AuditClaim   the payload of an ``audit`` event: what the run's own guards say they did
    ExitRecord   outbox/exit.json (``read_exit_record``)
    Question     one outbox/questions/<id>.json (``decode_question``)
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Literal, get_args

import msgspec

from .errors import RecordError

__all__ = ["Event", "AuditClaim", "AuditKind", "ExitRecord", "ExitStatus", "Question", "RecordError", "QUESTION_ID",
           "QUESTION_MAX",
           "decode_event", "decode_audit", "read_exit_record", "decode_question", "unparsed"]

ExitStatus = Literal["succeeded", "failed", "aborted", "killed"]
AuditKind = Literal["deny", "spill", "spill_failed", "isolate"]
AUDIT_KINDS: frozenset[str] = frozenset(get_args(AuditKind))

KIND = re.compile(r"[a-z][a-z0-9_.-]{0,63}")
QUESTION_ID = re.compile(r"[\w.-]{1,200}")  # a question's id: its file's name in outbox/questions
TEXT_MAX = 256 * 1024  # an event's text: a model's message may be long, a line is at most 1 MiB anyway
NAME_MAX = 200  # a tool, a step, an id
FIELD_MAX = 500  # one audit field
ERROR_MAX = 2000
QUESTION_MAX = 64 * 1024
OPTIONS_MAX = 50


def _cut(s: str, limit: int) -> str:
    return s if len(s) <= limit else s[: limit - 1] + "…"


def _line(s: str, limit: int) -> str:
    return _cut(" ".join(s.split()), limit)


class Event(msgspec.Struct):
    """One event line as the entrypoint writes it (``sandbox.entrypoint.EventLog``)."""

    kind: str = "unparsed"
    text: str = ""
    tool: str = ""
    payload: dict[str, object] = {}
    step: str = ""
    at: float = 0.0

    def __post_init__(self) -> None:
        if not KIND.fullmatch(self.kind):
            self.kind = "unparsed"
        self.text = _cut(self.text, TEXT_MAX)
        self.tool = _line(self.tool, NAME_MAX)
        self.step = _line(self.step, NAME_MAX)


def unparsed(text: str) -> Event:
    return Event(kind="unparsed", text=_cut(text, 500))


_event = msgspec.json.Decoder(Event)


def decode_event(raw: bytes) -> Event | None:
    """One line → an Event; None for a blank line (it still counts). Anything else is an ``unparsed`` Event."""
    text = raw.strip()
    if not text:
        return None
    try:
        return _event.decode(text)
    except (msgspec.DecodeError, RecursionError):
        return unparsed(text[:500].decode("utf-8", "replace"))


class AuditClaim(msgspec.Struct, omit_defaults=True):
    """What a guard inside the run says it did (``flower.core.audit.AuditEvent``'s fields)."""

    guard: str | None = None
    role: str | None = None
    tool: str | None = None
    reason: str | None = None
    path: str | None = None
    size: int | None = None
    session_id: str | None = None
    agent_id: str | None = None
    description: str | None = None

    def __post_init__(self) -> None:
        for name in ("guard", "role", "tool", "reason", "path", "session_id", "agent_id", "description"):
            value = getattr(self, name)
            if value is not None:
                setattr(self, name, _line(value, FIELD_MAX))

    def fields(self) -> dict[str, str | int]:
        """The fields that are set, by our names only."""
        return {k: v for k, v in msgspec.structs.asdict(self).items() if v is not None}


def decode_audit(ev: Event) -> tuple[AuditKind | None, AuditClaim]:
    """An ``audit`` event → (its kind when it is one we know, its claim); a malformed claim is an empty one."""
    kind = ev.text if ev.text in AUDIT_KINDS else None
    try:
        claim = msgspec.convert(ev.payload, AuditClaim)
    except msgspec.ValidationError:
        claim = AuditClaim()
    return kind, claim  # type: ignore[return-value]


class ExitRecord(msgspec.Struct):
    """outbox/exit.json: how the run says it ended (``sandbox.entrypoint.exit_document``)."""

    status: ExitStatus
    error: str | None = None
    cost_usd: float = 0.0
    exit_code: int | None = None

    def __post_init__(self) -> None:
        if self.error is not None:
            self.error = _line(self.error, ERROR_MAX)


_exit = msgspec.json.Decoder(ExitRecord)


def read_exit_record(folder: Path) -> ExitRecord | None:
    """The run's exit.json, read as hostile data; None when there is no plain file of it (missing, a symlink, a
    FIFO, oversized: the run wrote none the service can take). ``RecordError`` when it is one but not a record."""
    from .runfiles import read_file

    try:
        data = read_file(folder, "outbox/exit.json")
    except OSError:
        return None
    try:
        return _exit.decode(data)
    except msgspec.DecodeError as e:
        raise RecordError(f"the run wrote an exit.json that is not valid ({_line(str(e), 200)})") from None


class Question(msgspec.Struct):
    """One open question of the run's (``flower``'s human channel, written by the runner)."""

    id: str
    question: str = ""
    options: list[str] = []
    asked_at: str = ""
    timeout_s: float | None = None

    def __post_init__(self) -> None:
        self.question = _cut(self.question, QUESTION_MAX)
        self.options = [_cut(o, 1000) for o in self.options[:OPTIONS_MAX]]
        self.asked_at = _line(self.asked_at, 64)


_question = msgspec.json.Decoder(Question)


def decode_question(data: bytes) -> Question | None:
    """A question file's bytes → a Question; None when it is not one."""
    try:
        return _question.decode(data)
    except msgspec.DecodeError:
        return None
