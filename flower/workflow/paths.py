"""Where the starter flow keeps things, and the read-only look at a folder before running there.

Kept apart from ``starter`` so that ``flower status`` reads a folder's state without loading the SDK.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..core.lineage import FILENAME as LINEAGE_FILE, Lineage
from ..docs.brief import Brief
from ..docs.goal import Goal

__all__ = ["StarterPaths", "starter_paths", "is_git_repo", "wake_state"]


@dataclass(frozen=True)
class StarterPaths:
    """Every place the starter flow reads or writes, from one rule."""

    workspace: Path
    run_dir: Path
    workbench: Path
    brief: Path
    goal: Path
    log: Path

    @property
    def notes(self) -> Path:
        return self.workbench / "notes"

    @property
    def lineage(self) -> Path:
        return self.run_dir / LINEAGE_FILE

    @property
    def manifest(self) -> Path:
        return self.run_dir / "manifest.json"


def starter_paths(
    workspace: str | Path = ".",
    *,
    run_dir: str | Path = "runs",
    isolate: bool = False,
    brief_name: str = "需求.md",
    goal_name: str = "目标.md",
    log_name: str = "问答记录.md",
) -> StarterPaths:
    """The one place the workbench location rule lives; a hand-built path that is wrong fails silently.

    ``run_dir`` resolves like ``Runtime(run_dir=...)`` does: relative to the current directory.
    """
    ws = Path(workspace).resolve()
    bench = ws.parent / f".flower-{ws.name}" if isolate else ws / ".flower"
    notes = bench / "notes"
    return StarterPaths(ws, Path(run_dir).resolve(), bench, notes / brief_name, notes / goal_name, notes / log_name)


def is_git_repo(path: Path) -> bool:
    try:
        out = subprocess.run(["git", "-C", str(path), "rev-parse", "--is-inside-work-tree"],
                             capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return out.returncode == 0 and out.stdout.strip() == "true"


def wake_state(
    workspace: str | Path = ".",
    *,
    run_dir: str | Path = "runs",
    isolate: bool = False,
    brief_name: str = "需求.md",
    goal_name: str = "目标.md",
) -> dict[str, Any]:
    """Would ``flower`` here continue earlier work or start over? Reads only; writes not one byte.

    Keys: ``waking`` (the brief exists with its four sections complete), ``brief`` / ``goal`` (their
    paths, in ``<workbench.notes>/``), ``checks`` (how many checks the goal has; 0 without a goal),
    ``woke`` (``Lineage.woke``: wake-ups so far) and ``steps`` (a copy of ``Lineage.steps``, step →
    session_id). ``isolate`` must be what ``starter_flow`` gets: it decides where the workbench is.
    """
    paths = starter_paths(workspace, run_dir=run_dir, isolate=isolate, brief_name=brief_name, goal_name=goal_name)
    brief = Brief.load(paths.brief)
    goal = Goal.load(paths.goal)
    lineage = Lineage.open(paths.run_dir, paths.workspace)
    return {
        "waking": brief is not None and brief.complete(),
        "brief": paths.brief,
        "goal": paths.goal,
        "checks": len(goal.checks) if goal is not None else 0,
        "woke": lineage.woke,
        "steps": dict(lineage.steps),
    }
