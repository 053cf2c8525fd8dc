"""A folder's run state, read-only: what ``flower status`` prints, the oracle is told and ``go`` wakes from."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .terminal import one_line, tilde


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
                 handoffs=sorted(paths.notes.glob("交接-*.md")))
    return state


def snapshot(state: dict[str, Any]) -> list[str]:
    """What the oracle (and `flower status`) says about a folder's state."""
    lines = []
    brief, goal = state.get("brief_doc"), state.get("goal_doc")
    if state.get("waking"):
        lines.append(f"需求已确认({tilde(state['brief'])})")
        if brief is not None and brief.goal:
            lines.append("  目标:" + one_line(brief.goal, 200))
    else:
        lines.append("需求还没确认" + ("(确认书不完整)" if brief is not None else ""))
    if state.get("checks"):
        unver = len(getattr(goal, "unverifiable", None) or [])
        lines.append(f"目标 {state['checks']} 条检查" + (f"(其中 {unver} 条此环境无法验证)" if unver else "")
                     + f"({tilde(state['goal'])})")
    if state.get("steps"):
        lines.append("会话:" + " · ".join(f"{k} {v[:8]}" for k, v in state["steps"].items()))
    if state.get("woke"):
        lines.append(f"这里跑过 {state['woke']} 次")
    rows = state.get("last_results") or []
    if rows:
        cost = sum(float(r.get("cost_usd") or 0) for r in rows)
        lines.append(f"上次运行 {state.get('last_run')}:{len(rows)} 步,${cost:.4f}")
        for r in rows:
            mark = "+" if r.get("ok") else "x"
            err = f" —— {one_line(r.get('error'), 100)}" if r.get("error") else ""
            lines.append(f"  {mark} {r.get('step')} ${float(r.get('cost_usd') or 0):.4f}{err}")
    for h in state.get("handoffs") or []:
        lines.append(f"交接书 {tilde(h)}")
    return lines
