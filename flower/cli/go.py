"""``flower go``: the starter flow here — clarify, set the goal, work — and continued on the next call."""

from __future__ import annotations

import argparse
import asyncio
import math
import sys
from pathlib import Path
from typing import Any

from ..core.errors import ConfigError, ManifestError
from . import credentials, places
from .drive import drive, finish, shown_runtime
from .errors import Exit
from .messages import doc, t
from .oracle import ask_once
from .screen import EVENTS_FILE, Screen
from .places import exclude_from_git
from .state import clear_done, mark_done, read_state
from .terminal import ask, echo, isatty, one_line, tilde, tokens_k


EMPTY_ASK, FRESH_PROMPT, WAKE_PROMPT, DONE_PROMPT = "go.empty_ask", "go.fresh_prompt", "go.wake_prompt", "go.done_prompt"
"""Catalogue keys: the empty-ask error and the three prompts of a bare ``flower``."""


def _read_ask(state: dict[str, Any], new: bool) -> tuple[str, bool]:
    """No ask on the command line: ask at the terminal, or read it from a pipe.

    A job the judge called achieved is not continued on Enter: that would spend more paid rounds on
    finished work. Enter (or /new) starts something new; /continue goes on anyway.
    """
    done = bool(state.get("done")) and bool(state.get("waking"))
    if not isatty(sys.stdin):
        try:
            text = sys.stdin.read() if sys.stdin is not None else ""
        except (OSError, ValueError):
            text = ""
        if done and not new and not text.strip():
            raise Exit(1, t("go.done_piped"))
        return text.strip(), new
    while True:
        waking = bool(state.get("waking")) and not new
        echo(t(DONE_PROMPT if waking and done else WAKE_PROMPT if waking else FRESH_PROMPT), flush=True)
        try:
            text = ask("> ").strip()
        except (EOFError, KeyboardInterrupt):
            echo()
            raise Exit(1, t("main.cancelled")) from None
        if text == "/new" or (waking and done and not text):
            new = True
            continue
        if text == "/continue" and waking:
            return "", new
        if not text and not waking:
            raise Exit(1, t(EMPTY_ASK))
        return text, new


def _banner(ws: Path, state: dict[str, Any], runtime: Any) -> str:
    from ..workflow.starter import WORK_STEP

    bits = [t("go.banner.brief")]
    if state.get("checks"):
        bits.append(t("go.banner.checks", n=state["checks"]))
    sid = (state.get("steps") or {}).get(WORK_STEP)
    if sid:
        try:
            used = runtime.context_of(sid)
        except Exception:  # noqa: BLE001 - the banner is a courtesy
            used = 0
        if used:
            bits.append(t("go.banner.context", k=tokens_k(used)))
    bits.append(t("go.banner.woke", n=max(1, int(state.get("woke") or 0))))
    return t("go.banner", ws=tilde(ws), bits=" · ".join(bits))


def _handoff_policy(args: argparse.Namespace) -> Any:
    if args.no_handoff:
        return False
    if args.window:
        from ..core.agent import HandoffPolicy

        return HandoffPolicy(window=args.window)
    return True


def starter_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    """The starter_flow keyword arguments the go flags stand for."""
    timeout = args.timeout
    return {
        "clarify_only": args.clarify_only,
        "goal": not args.no_goal,
        "rounds": args.rounds,
        "judge_can_run": args.judge_can_run,
        "max_asks": None if args.asks < 0 else args.asks,
        "timeout_s": None if math.isinf(timeout) and timeout > 0 else max(0.0, timeout),
        "isolate": args.isolate,
        "instructions": args.instructions,
    }


def cmd_go(args: argparse.Namespace) -> int:
    from ..docs.verdict import Verdict
    from ..workflow import VERDICT_KEY, starter_flow, starter_paths
    from ..workflow.paths import is_git_repo  # the flow's own check, made before the ask is read

    ws = places.workspace(args)
    rd = places.run_dir(args, ws, create=False)
    if args.isolate and not is_git_repo(ws):
        raise Exit(1, t("go.isolate_needs_git", path=ws))
    paths = starter_paths(ws, run_dir=rd, isolate=args.isolate)
    screen = Screen(verbose=args.verbose, brief_path=paths.brief)
    credentials.require(args, screen)
    try:
        state = read_state(ws, rd, isolate=args.isolate)
    except (ManifestError, OSError) as e:
        raise Exit(1, t("go.state_unreadable", error=one_line(e, 300)))
    ask, new = " ".join(args.ask).strip(), args.new
    if ask.startswith(("?", "？")):
        return ask_once(ask[1:].strip(), args, ws, rd)
    if not args.ask:
        ask, new = _read_ask(state, new)
    kw = starter_kwargs(args)
    stdin_tty = isatty(sys.stdin)
    if not stdin_tty and kw["timeout_s"] != 0:
        screen.say(t("go.no_tty"))
    rd = places.run_dir(args, ws)
    exclude_from_git(ws, rd, paths.workbench)
    try:
        wf = starter_flow(ask, workspace=ws, run_dir=rd, new=new, **kw)
    except ConfigError as e:
        raise Exit(1, str(e)) from None
    screen = Screen(verbose=args.verbose, brief_path=paths.brief, events_path=rd / EVENTS_FILE)
    runtime = shown_runtime(screen, workspace=ws, run_dir=rd, trim=not args.no_trim, handoff=_handoff_policy(args))
    try:
        if state.get("waking") and not new:
            screen.say(_banner(ws, state, runtime))
        listen = stdin_tty or kw["timeout_s"] != 0
        oracle_ctx = {"workspace": ws, "run_dir": rd, "isolate": args.isolate}
        if not args.clarify_only:
            clear_done(rd)  # work starts again: the last verdict no longer describes the folder
        ctx = asyncio.run(drive(wf, runtime, screen, listen=listen, oracle_ctx=oracle_ctx))
        code = finish(ctx, runtime, screen)
        if code == 0:
            verdict = ctx.get(VERDICT_KEY)
            if isinstance(verdict, Verdict) and verdict.achieved and not args.clarify_only:
                mark_done(rd, str(verdict.state))
            screen.say(t("go.clarified" if args.clarify_only else "go.done", brief=doc(tilde(paths.brief)))
                       + ("" if args.no_goal or args.clarify_only else t("go.goal_path", goal=doc(tilde(paths.goal)))))
        return code
    finally:
        runtime.close()
        screen.close()
