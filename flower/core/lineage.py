"""Lineage: which step name maps to which session, across process restarts.

Running ``flower`` again in the same directory reattaches every step to the
session it had last time (continuity); ``runs/lineage.json`` is that memory.
Losing it silently is the worst outcome — the run starts over and nobody
notices — so a file that cannot be read is an error that names the file, never
a quiet reset. Writes happen under a lock file and go through temp + rename, so
two processes remembering different steps at once both keep their entry and a
killed process never leaves half a file.
"""

from __future__ import annotations

import fcntl
import json
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

VERSION = 1


class LineageError(RuntimeError):
    """The lineage file exists but cannot be trusted; continuity would be lost."""


class Lineage:
    """``{step name: session_id}`` persisted in one JSON file (``{"version": 1, "steps": {...}}``)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.lock_path = self.path.with_name(self.path.name + ".lock")

    def __repr__(self) -> str:
        return f"Lineage({str(self.path)!r})"

    # -- reading -----------------------------------------------------------
    def steps(self) -> dict[str, str]:
        """Every remembered step. Reads need no lock: the file is only ever replaced whole."""
        return self._read()

    def lookup(self, step: str) -> str | None:
        """The session id this step had last time, or None."""
        return self._read().get(step)

    get = lookup

    # -- writing -----------------------------------------------------------
    def remember(self, step: str, session_id: str) -> None:
        """Map ``step`` to ``session_id`` (replacing an older mapping)."""
        if not step or not isinstance(step, str):
            raise ValueError("Lineage.remember needs a non-empty step name")
        if not session_id or not isinstance(session_id, str):
            raise ValueError(f"Lineage.remember({step!r}) needs a non-empty session_id")
        with self._locked():
            steps = self._read()
            if steps.get(step) == session_id:
                return
            steps[step] = session_id
            self._write(steps)

    def forget(self, step: str) -> bool:
        """Drop a step so its next run starts a fresh session; True if it was there."""
        if not self.path.exists():
            return False
        with self._locked():
            steps = self._read()
            if step not in steps:
                return False
            del steps[step]
            self._write(steps)
            return True

    # -- internals ---------------------------------------------------------
    @contextmanager
    def _locked(self) -> Iterator[None]:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.lock_path, "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def _read(self) -> dict[str, str]:
        try:
            raw = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return {}
        except (OSError, UnicodeDecodeError) as e:
            raise self._error(f"cannot be read ({e})") from e
        if not raw.strip():
            return {}  # an empty file holds nothing that could be lost
        try:
            data: Any = json.loads(raw)
        except ValueError as e:
            raise self._error(f"is not valid JSON ({e})") from e
        steps = data.get("steps") if isinstance(data, dict) else None
        if not isinstance(steps, dict):
            raise self._error('has no "steps" object')
        bad = [k for k, v in steps.items() if not isinstance(v, str) or not v]
        if bad:
            raise self._error(f"has steps whose session_id is not a non-empty string: {bad[:5]}")
        return dict(steps)

    def _write(self, steps: dict[str, str]) -> None:
        text = json.dumps({"version": VERSION, "steps": steps}, ensure_ascii=False, indent=2, sort_keys=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{self.path.name}.", suffix=".tmp", dir=self.path.parent)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(text + "\n")
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

    def _error(self, what: str) -> LineageError:
        return LineageError(
            f"lineage file {self.path} {what}; fix it by hand, or delete it to start every step in a "
            "fresh session (continuity with earlier runs will be lost)"
        )
