"""A folder's run state, read-only: what ``flower status`` prints, the oracle is told and ``go`` wakes from."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from .messages import doc, name, t
from .terminal import one_line, tilde


DONE_FILE = "done.json"
"""In the run dir while the judge's last word on the job is "achieved"; any later round removes it."""


def read_done(rd: Path) -> dict[str, Any] | None:
    try:
        data = json.loads((rd / DONE_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def mark_done(rd: Path, verdict: str) -> None:
    from ..core.files import write_atomic

    write_atomic(rd / DONE_FILE, json.dumps({"verdict": verdict, "at": time.strftime("%Y-%m-%d %H:%M:%S")},
                                            ensure_ascii=False) + "\n")


def clear_done(rd: Path) -> None:
    (rd / DONE_FILE).unlink(missing_ok=True)


def read_state(ws: Path, rd: Path, *, isolate: bool = False) -> dict[str, Any]:
    """``wake_state()`` plus what a person wants to see, all read-only: the documents, the last run, handoffs."""
    from ..core import manifest
    from ..docs import Brief, Goal
    from ..workflow import starter_paths, wake_state

    state = dict(wake_state(ws, run_dir=rd, isolate=isolate))
    paths = starter_paths(ws, run_dir=rd, isolate=isolate)
    rows = manifest.read_rows(paths.manifest)
    last = rows[-1].get("run") if rows else None
    state.update(workspace=paths.workspace, run_dir=paths.run_dir, workbench=paths.workbench, log=paths.log,
                 brief_doc=Brief.load(paths.brief), goal_doc=Goal.load(paths.goal), last_run=last,
                 last_results=[r for r in rows if r.get("run") == last],
                 handoffs=sorted(paths.notes.glob("交接-*.md")), done=read_done(paths.run_dir))
    return state


def snapshot(state: dict[str, Any]) -> list[str]:
    """What the oracle (and `flower status`) says about a folder's state."""
    lines = []
    brief, goal = state.get("brief_doc"), state.get("goal_doc")
    if state.get("waking"):
        lines.append(t("state.brief_ok", path=doc(tilde(state["brief"]))))
        if brief is not None and brief.goal:
            lines.append(t("state.goal_line", text=one_line(brief.goal, 200)))
    else:
        lines.append(t("state.brief_missing") + (t("state.brief_incomplete") if brief is not None else ""))
    if state.get("checks"):
        unver = len(getattr(goal, "unverifiable", None) or [])
        lines.append(t("state.checks", n=state["checks"], path=doc(tilde(state["goal"])),
                       unverifiable=t("state.unverifiable", n=unver) if unver else ""))
    if state.get("steps"):
        lines.append(t("state.sessions", list=" · ".join(f"{name(k)} {v[:8]}" for k, v in state["steps"].items())))
    done = state.get("done")
    if done:
        lines.append(t("state.done", when=done.get("at") or "?"))
    if state.get("woke"):
        lines.append(t("state.woke", n=state["woke"]))
    rows = state.get("last_results") or []
    if rows:
        cost = sum(float(r.get("cost_usd") or 0) for r in rows)
        lines.append(t("state.last_run", run=state.get("last_run"), n=len(rows), cost=cost))
        for r in rows:
            mark = "+" if r.get("ok") else "x"
            err = f" —— {one_line(r.get('error'), 100)}" if r.get("error") else ""
            lines.append(f"  {mark} {name(r.get('step'))} ${float(r.get('cost_usd') or 0):.4f}{err}")
    for h in state.get("handoffs") or []:
        lines.append(t("state.handoff", path=doc(tilde(h))))
    return lines
