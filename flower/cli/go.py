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
from .oracle import ask_once
from .screen import EVENTS_FILE, Screen
from .state import read_state
from .terminal import isatty, one_line, tilde, tokens_k


EMPTY_ASK = "诉求是空的。直接 `flower` 然后按提示输入,或者 flower \"帮我做一个 X\"。"
FRESH_PROMPT = "要做什么? 一句话就够,回车开始(Ctrl-C 退出)"
WAKE_PROMPT = "接着上次? 直接回车 = 接着做;也可以说点新的;/new = 重开一件事(Ctrl-C 退出)"


def _read_ask(state: dict[str, Any], new: bool) -> tuple[str, bool]:
    """No ask on the command line: ask at the terminal, or read it from a pipe."""
    if not isatty(sys.stdin):
        try:
            text = sys.stdin.read() if sys.stdin is not None else ""
        except (OSError, ValueError):
            text = ""
        return text.strip(), new
    while True:
        waking = bool(state.get("waking")) and not new
        print(WAKE_PROMPT if waking else FRESH_PROMPT, flush=True)
        try:
            text = input("> ").strip()
        except (EOFError, KeyboardInterrupt):
            print()
            raise Exit(1, "已取消") from None
        if text == "/new":
            new = True
            continue
        if not text and not waking:
            raise Exit(1, EMPTY_ASK)
        return text, new


def _banner(ws: Path, state: dict[str, Any], runtime: Any) -> str:
    from ..workflow.starter import WORK_STEP

    bits = ["需求已确认"]
    if state.get("checks"):
        bits.append(f"目标 {state['checks']} 条")
    sid = (state.get("steps") or {}).get(WORK_STEP)
    if sid:
        try:
            used = runtime.context_of(sid)
        except Exception:  # noqa: BLE001 - the banner is a courtesy
            used = 0
        if used:
            bits.append(f"干活上下文 {tokens_k(used)}")
    bits.append(f"第 {max(1, int(state.get('woke') or 0))} 次唤醒")
    return f"<- 在 {tilde(ws)} 接上上次  " + " · ".join(bits)


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
    from ..workflow import starter_flow, starter_paths
    from ..workflow.starter import is_git_repo  # the flow's own check, made before the ask is read

    ws = places.workspace(args)
    rd = places.run_dir(args, ws, create=False)
    if args.isolate and not is_git_repo(ws):
        raise Exit(1, f"--isolate 要求 {ws} 是 git 仓库(每个 subagent 要分一份 worktree)。先 git init,或者去掉 --isolate。")
    paths = starter_paths(ws, run_dir=rd, isolate=args.isolate)
    screen = Screen(verbose=args.verbose, brief_path=paths.brief)
    credentials.require(args, screen)
    try:
        state = read_state(ws, rd, isolate=args.isolate)
    except (ManifestError, OSError) as e:
        raise Exit(1, f"读不了上次的运行状态:{one_line(e, 300)}")
    ask, new = " ".join(args.ask).strip(), args.new
    if ask.startswith(("?", "？")):
        return ask_once(ask[1:].strip(), args, ws, rd)
    if not args.ask:
        ask, new = _read_ask(state, new)
    kw = starter_kwargs(args)
    stdin_tty = isatty(sys.stdin)
    if not stdin_tty and kw["timeout_s"] != 0:
        screen.say("! 标准输入不是终端,没人能回答提问:输入一结束,提问就让它自己判断。无人值守就加 --timeout 0")
    rd = places.run_dir(args, ws)
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
        ctx = asyncio.run(drive(wf, runtime, screen, listen=listen, oracle_ctx=oracle_ctx))
        code = finish(ctx, runtime, screen)
        if code == 0:
            done = "需求已确认" if args.clarify_only else "完成"
            screen.say(f"+ {done} · 需求 {tilde(paths.brief)}" + ("" if args.no_goal or args.clarify_only
                                                             else f" · 目标 {tilde(paths.goal)}"))
        return code
    finally:
        runtime.close()
        screen.close()
