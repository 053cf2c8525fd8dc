"""The oracle: a side question answered by a fresh session that never enters the run's context."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
from pathlib import Path

from . import credentials
from .errors import Exit
from .messages import t
from .screen import EVENT_TEXT_MAX, EVENTS_FILE, ORACLE_WINDOW, Screen, event_line
from .state import read_state, snapshot
from .terminal import clean, one_line, route_library_logs, tilde


def _tail_events(run_dir: Path, n: int = ORACLE_WINDOW) -> list[str]:
    path = run_dir / EVENTS_FILE
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - 256 * 1024))
            raw = f.read().decode("utf-8", "replace")
    except OSError:
        return []
    out = []
    for line in raw.splitlines()[-n:]:
        try:
            out.append(event_line(json.loads(line)))
        except ValueError:
            continue
    return out


ORACLE_PROMPT = """\
有人在旁边问了一句。这次运行也许还在跑,也许刚停下;你只回答,不插手,答完即弃。

问题:{question}

这次运行的快照:
{snapshot}

最近的事件(旧 → 新,最多 {window} 条,每条截到 {cut} 字):
{events}

工作区 `{workspace}`;工作台 `{workbench}`:需求 `{brief}`、目标 `{goal}`、问答记录 `{log}`,\
长产物在 artifacts/,交接书在 notes/。先看再答;看不到的就直说看不到。回答要简短。"""


async def aside(question: str, screen: Screen, *, workspace: Path, run_dir: Path, isolate: bool,
                live: bool) -> float:
    """Ask the oracle: a separate Runtime under <run_dir>/aside, a fresh session, never the run's context."""
    from ..core.roles import oracle
    from ..core.runtime import Runtime
    from ..core.workbench import Workbench
    from ..workflow import starter_paths

    route_library_logs()
    try:
        paths = starter_paths(workspace, run_dir=run_dir, isolate=isolate)
        try:
            state = read_state(workspace, run_dir, isolate=isolate)
        except (RuntimeError, OSError) as e:
            state = {}
            screen.say(t("oracle.state_unreadable", error=one_line(e, 120)))
        events = list(screen.recent) if live else _tail_events(run_dir)
        prompt = ORACLE_PROMPT.format(
            question=question, snapshot="\n".join(f"- {x}" for x in snapshot(state)) or "- (什么都没有)",
            window=ORACLE_WINDOW, cut=EVENT_TEXT_MAX, events="\n".join(events) or "(没有事件记录)",
            workspace=paths.workspace, workbench=paths.workbench, brief=paths.brief, goal=paths.goal, log=paths.log)
        wb = Workbench(paths.workspace, home=paths.workbench) if paths.workbench.is_dir() else False
        rt = Runtime(workspace=paths.workspace, run_dir=run_dir / "aside", workbench=wb, handoff=False)
        try:
            r = await rt.run(oracle(), prompt, step_name="旁路问答")
        finally:
            rt.close()
    except Exit:
        raise
    except Exception as e:  # noqa: BLE001 - the oracle never disturbs the run
        screen.say(t("oracle.failed", error=f"{type(e).__name__}: {one_line(e, 200)}"))
        return 0.0
    if not r.ok:
        screen.say(t("oracle.failed", error=one_line(r.error or t("oracle.no_answer"), 200)))
        return r.cost_usd
    screen.say(t("oracle.head"))
    for line in clean(r.text).strip().splitlines() or [t("oracle.empty")]:
        screen.say(f"  {line}".rstrip())
    tail = t("oracle.live") if live else t("oracle.after")
    screen.say(t("oracle.tail", cost=r.cost_usd, tail=tail))
    return r.cost_usd


def ask_once(question: str, args: argparse.Namespace, ws: Path, rd: Path) -> int:
    """``flower ask`` (and ``flower "?…"``): one answer about a folder's run, from outside any run."""
    if not question:
        raise Exit(2, t("oracle.want_question"))
    if not rd.is_dir():
        raise Exit(1, t("oracle.never_ran", ws=tilde(ws), rd=tilde(rd)))
    screen = Screen(verbose=args.verbose)
    credentials.require(args, screen)
    asyncio.run(aside(question, screen, workspace=ws, run_dir=rd, isolate=getattr(args, "isolate", False),
                      live=False))
    return 0
