"""Lineage: which step used which session, across process restarts.

Running ``flower`` again in the same place reattaches every step to the session it
had last time (continuity); ``<run_dir>/lineage.json`` is that memory, together
with how many times the run has woken up.

The workspace is a guard: the SDK derives its project key from the workspace path,
so after the folder moved the old session ids cannot be found — a lineage written
for another workspace reads as empty. A missing or unreadable file also reads as
empty, never as an error (a warning is logged so a lost memory is not silent), and
a failed write never stops a run. Writes go through temp + replace under a lock
file, merging what another process remembered meanwhile, so two processes sharing
a run dir keep each other's steps and a killed process never leaves half a file.
"""

from __future__ import annotations

import json
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .files import locked, write_atomic

__all__ = ["Lineage", "FILENAME"]


def _warn(event: str, **fields: Any) -> None:
    """structlog, imported only when there is something to say: ``flower status`` reads lineage and stays quick."""
    import structlog

    structlog.get_logger("flower.lineage").warning(event, **fields)


FILENAME = "lineage.json"
VERSION = 2


@dataclass
class Lineage:
    """``steps``: step name → session_id; ``woke``: how many times the run woke up."""

    path: Path
    workspace: Path
    steps: dict[str, str] = field(default_factory=dict)
    woke: int = 0

    def __post_init__(self) -> None:
        self.path = Path(self.path)
        self.workspace = Path(self.workspace).resolve()
        self._forgotten: set[str] = set()

    # -- reading -----------------------------------------------------------
    @classmethod
    def open(cls, run_dir: str | Path, workspace: str | Path) -> Lineage:
        """Read ``<run_dir>/lineage.json``; missing, unreadable or another workspace's → empty, no error."""
        lin = cls(Path(run_dir) / FILENAME, Path(workspace))
        data = lin._read()
        if data is not None:
            lin.steps, lin.woke = data
        return lin

    def lookup(self, step: str) -> str | None:
        """The session id this step had last time, or None."""
        return self.steps.get(step)

    # -- writing -----------------------------------------------------------
    def remember(self, step: str, session_id: str) -> None:
        """Map ``step`` to ``session_id`` and write at once; an empty step or id is ignored."""
        if not step or not session_id:
            return
        self._forgotten.discard(step)
        if self.steps.get(step) == session_id and self.path.exists():
            return
        self.steps[step] = session_id
        self._spill()

    def forget(self, step: str) -> bool:
        """Drop one step so its next run starts a fresh session; True if it was there."""
        if step not in self.steps:
            return False
        del self.steps[step]
        self._forgotten.add(step)
        self._spill()
        return True

    def bump(self) -> int:
        """One more wake-up: increment, write, return the new count (1 on the first run)."""
        self.woke += 1
        self._spill(bump=True)
        return self.woke

    def archive(self, into: str | Path, *, extra: list[Path] | None = None) -> Path:
        """Move the lineage file and ``extra`` into ``<into>/<YYYYmmdd-HHMMSS>/``; reset steps and woke.

        Moving, not deleting: a fresh start can always be undone by moving them back.
        """
        base = Path(into) / time.strftime("%Y%m%d-%H%M%S")
        target, n = base, 1
        while target.exists():
            n += 1
            target = base.with_name(f"{base.name}-{n}")
        target.mkdir(parents=True)
        with locked(self.path):
            for p in [self.path, *(Path(x) for x in extra or [])]:
                if p.exists():
                    shutil.move(str(p), str(target / p.name))
        self.steps, self.woke = {}, 0
        self._forgotten.clear()
        return target

    # -- internals ---------------------------------------------------------
    def _read(self) -> tuple[dict[str, str], int] | None:
        """(steps, woke) from disk, or None when missing / unreadable / written for another workspace."""
        try:
            raw = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return None
        except (OSError, UnicodeDecodeError) as e:
            _warn("lineage.unreadable", path=str(self.path), error=str(e))
            return None
        if not raw.strip():
            return None
        try:
            data: Any = json.loads(raw)
        except ValueError as e:
            _warn("lineage.unreadable", path=str(self.path), error=f"not JSON: {e}")
            return None
        if not isinstance(data, dict) or not isinstance(data.get("steps"), dict):
            _warn("lineage.unreadable", path=str(self.path), error='no "steps" object')
            return None
        if data.get("workspace") != str(self.workspace):
            _warn("lineage.other_workspace", path=str(self.path), recorded=data.get("workspace"),
                         workspace=str(self.workspace))
            return None
        steps = {str(k): v for k, v in data["steps"].items() if isinstance(v, str) and v}
        woke = data.get("woke")
        return steps, woke if isinstance(woke, int) and woke >= 0 else 0

    def _spill(self, *, bump: bool = False) -> None:
        """Write atomically, merging what another process wrote meanwhile; OSError is logged, never raised."""
        try:
            with locked(self.path):
                disk = self._read()
                if disk is not None:
                    steps, woke = disk
                    merged = {k: v for k, v in steps.items() if k not in self._forgotten}
                    merged.update(self.steps)
                    self.steps = merged
                    if bump:
                        self.woke = max(self.woke, woke + 1)
                    else:
                        self.woke = max(self.woke, woke)
                self._write()
        except OSError as e:
            _warn("lineage.write_failed", path=str(self.path), error=str(e))

    def _write(self) -> None:
        data = {"version": VERSION, "workspace": str(self.workspace), "woke": self.woke, "steps": self.steps}
        write_atomic(self.path, json.dumps(data, ensure_ascii=False, indent=2, sort_keys=True) + "\n", durable=True)
