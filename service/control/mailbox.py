"""What reaches a run from outside: its open questions read, answers and messages written, cancels asked for — and
a parked run woken by them (it has no sandbox to read them: it is put back in line, and resumed).

A run's questions are its files (``outbox/questions/*.json``), read as hostile data; what is written back goes
where the run can read it but never replace it, owned by the run's uid when the backend runs it as another
one. A cancel ends a queued run at once; a starting or running one is stopped by the scheduler's next pass.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from sandbox.backends.base import Backend
from sandbox.records import QUESTION_ID, Question, decode_question

from ..clock import SYSTEM, Clock
from ..logging import get_logger
from ..registry import Run, RunsTable
from .live import layout_of

__all__ = ["Mailbox", "QUESTION_BYTES"]

QUESTION_BYTES = 64 * 1024

log = get_logger("flower.service.scheduler")


class Mailbox:
    def __init__(self, runs_root: Path, runs: RunsTable, backend: Backend, *,
                 ended: Callable[[str], None], wake: Callable[[], None], clock: Clock = SYSTEM) -> None:
        self.clock = clock
        self.runs_root = runs_root
        self.runs = runs
        self.backend = backend
        self._ended = ended  # a queued run cancelled: its streams are told
        self._wake = wake

    def questions(self, run: Run) -> list[Question]:
        """Blocking: the run's open questions, read as hostile data — well-formed ones only, oldest first."""
        from sandbox.runfiles import list_files, read_file

        folder = layout_of(self.runs_root, run).dir
        out = []
        for name in list_files(folder, "outbox/questions", suffix=".json", most=100):
            try:
                q = decode_question(read_file(folder, f"outbox/questions/{name}", limit=QUESTION_BYTES))
            except OSError:
                continue
            if q is not None and q.id == name[:-5] and QUESTION_ID.fullmatch(q.id):
                out.append(q)
        return out

    def mail(self, run: Run, rel: str, doc: dict[str, str]) -> None:
        """Blocking: write one mailbox file (answers/…, inbox/…, interrupt.json) where the run can read it but
        never replace it; owned by the run's uid when the backend runs it as another one."""
        from sandbox.runfiles import write_file

        owner = self.backend.mail_owner()
        write_file(layout_of(self.runs_root, run).mailbox, rel,
                   json.dumps(doc, ensure_ascii=False).encode("utf-8"), owner=owner)

    def request_cancel(self, run_id: str) -> None:
        """Queued runs end at once; starting/running ones are stopped on the next pass."""
        row = self.runs.cancel(run_id, at=self.clock.now())
        if row is not None and row.status == "cancelled":
            self._ended(run_id)
        self._wake()

    def wake(self, run: Run, why: str) -> bool:
        """A parked run back in line, to be resumed in a new sandbox that reads what was written for it; False when
        it was not parked (woken already, or ended)."""
        woken = self.runs.unpark(run.id)
        if woken is not None:
            log.info("run.woken", tenant=run.tenant, run=run.id, why=why)
            self._wake()
        return woken is not None

    def has_words(self, run: Run) -> bool:
        """Blocking: whether a parked run has words waiting — an answer to a question it left open, or a message or
        an interrupt written since it was parked (one sent before was the sandbox's to read)."""
        box = layout_of(self.runs_root, run).mailbox
        if any((box / "answers" / f"{q.id}.json").is_file() for q in self.questions(run)):
            return True
        since = (run.parked_at or 0.0) - 1.0
        inbox = box / "inbox"
        written = [*(inbox.iterdir() if inbox.is_dir() else []), box / "interrupt.json"]
        return any(p.is_file() and p.stat().st_mtime >= since for p in written)
