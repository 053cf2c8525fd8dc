"""What reaches a run from outside: its open questions read, answers and messages written, cancels asked for.

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
from ..registry import Run, RunsTable
from .live import layout_of

__all__ = ["Mailbox", "QUESTION_BYTES"]

QUESTION_BYTES = 64 * 1024


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
