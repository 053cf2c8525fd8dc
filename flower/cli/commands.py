"""The subcommands other than ``go``, the table that names them all, and ``main`` that dispatches to them."""

from __future__ import annotations

import argparse
import asyncio
import importlib
import json
import os
import sys
from pathlib import Path
from typing import Any, Callable

from . import credentials, places
from .args import parse, parser
from .demo import demo
from .drive import drive, finish, install_signals, shown_runtime
from .errors import Exit
from .go import cmd_go
from .oracle import ask_once
from .remote import cmd_remote
from .screen import EVENTS_FILE, Screen
from .state import read_state, snapshot
from .terminal import isatty, one_line, tilde


def load_target(target: str) -> Any:
    """``module:attr`` or ``file.py:attr`` → the Workflow (a callable is called once)."""
    from ..workflow import Workflow

    mod, sep, attr = target.rpartition(":")
    if not sep or not mod or not attr:
        raise Exit(1, "需要 模块:属性 形式,例如 flows:main")
    if mod.endswith(".py") or os.sep in mod or "/" in mod:
        path = Path(mod)
        if not path.is_file():
            raise Exit(1, f"找不到 {mod}(当前目录 {Path.cwd()})。给的是文件路径就要能对上;要按模块名导入就别带 .py")
        sys.path.insert(0, str(path.resolve().parent))
        name = path.stem
    else:
        sys.path.insert(0, str(Path.cwd()))
        name = mod
    try:
        module = importlib.import_module(name)
    except Exception as e:  # noqa: BLE001
        raise Exit(1, f"导入 '{name}' 失败:{type(e).__name__}: {one_line(e, 300)}") from None
    if not hasattr(module, attr):
        raise Exit(1, f"'{name}' 里没有 '{attr}'")
    obj = getattr(module, attr)
    if callable(obj) and not isinstance(obj, Workflow):
        try:
            obj = obj()
        except Exit:
            raise
        except Exception as e:  # noqa: BLE001
            raise Exit(1, f"调用 '{target}' 出错:{type(e).__name__}: {one_line(e, 300)}") from None
    if not isinstance(obj, Workflow):
        raise Exit(1, f"'{target}' 给出的不是 Workflow,而是 {type(obj).__name__}")
    return obj


def cmd_run(args: argparse.Namespace) -> int:
    ws = places.workspace(args)
    rd = places.run_dir(args, ws)
    wf = load_target(args.target)
    screen = Screen(verbose=args.verbose, events_path=rd / EVENTS_FILE)
    credentials.require(args, screen)
    runtime = shown_runtime(screen, workspace=ws, run_dir=rd, trim=args.trim,
                            workbench=bool(args.workbench) and getattr(wf, "workbench", None) is None)
    try:
        listen = isatty(sys.stdin) or getattr(wf, "channel", None) is not None
        oracle_ctx = {"workspace": ws, "run_dir": rd, "isolate": False}
        ctx = asyncio.run(drive(wf, runtime, screen, listen=listen, oracle_ctx=oracle_ctx))
        return finish(ctx, runtime, screen)
    finally:
        runtime.close()
        screen.close()


def cmd_once(args: argparse.Namespace) -> int:
    from ..core.agent import AgentSpec

    ws = places.workspace(args)
    rd = places.run_dir(args, ws)
    if args.fork and not args.resume:
        raise Exit(2, "--fork 要和 --resume SESSION_ID 一起用")
    screen = Screen(verbose=args.verbose, events_path=rd / EVENTS_FILE)
    credentials.require(args, screen)
    tools = [t.strip() for t in args.tools.split(",") if t.strip()]
    spec = AgentSpec("ad-hoc", args.instructions, allowed_tools=tools, permission_mode=args.permission_mode,
                     max_budget_usd=args.budget)
    runtime = shown_runtime(screen, workspace=ws, run_dir=rd, trim=args.trim, workbench=bool(args.workbench))

    async def go() -> Any:
        install_signals(asyncio.get_running_loop(), runtime, screen, None)
        return await runtime.run(spec, " ".join(args.prompt), step_name="ad-hoc", resume=args.resume,
                                 fork=args.fork, on_event=screen.event)

    try:
        r = asyncio.run(go())
        screen.say(f"\n总花费 ${runtime.total_cost():.4f} · 会话 {r.session_id} · 清单 {runtime.manifest_path}")
        if not r.ok:
            raise Exit(1, f"没成:{one_line(r.error or '未知错误', 300)}")
        return 0
    finally:
        runtime.close()
        screen.close()


def cmd_status(args: argparse.Namespace) -> int:
    """Read-only: not a byte is written, not even the run dir is created."""
    ws = places.workspace(args, create=False)
    rd = places.run_dir(args, ws, create=False)
    try:
        state = read_state(ws, rd, isolate=args.isolate)
    except (RuntimeError, OSError) as e:
        raise Exit(1, f"读不了运行状态:{one_line(e, 300)}")
    if args.json:
        print(json.dumps(_jsonable(state), ensure_ascii=False, indent=2))
        return 0
    print(f"flower status · {tilde(ws)} · 运行目录 {tilde(rd)}")
    nxt = (f"接着上次(第 {max(1, int(state.get('woke') or 0))} 次唤醒)" if state.get("waking")
           else "从头开始(先问清需求)")
    print(f"- 在这里跑 flower 会:{nxt}")
    for line in snapshot(state):
        print(f"- {line}" if not line.startswith("  ") else f"  {line}")
    if not rd.is_dir():
        print("- 这里还没跑过(没有运行目录)")
    return 0


def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, Path):
        return str(value)
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    to_md = getattr(value, "to_markdown", None)
    if callable(to_md):
        fields = {k: _jsonable(v) for k, v in vars(value).items() if not k.startswith("_") and k != "path"}
        return {**fields, "markdown": to_md()}
    return str(value)


def cmd_ask(args: argparse.Namespace) -> int:
    ws = places.workspace(args, create=False)
    rd = places.run_dir(args, ws, create=False)
    return ask_once(" ".join(args.question).strip(), args, ws, rd)


def cmd_setup(args: argparse.Namespace) -> int:
    from ..core.credentials import TOKEN_KEYS, load_dotenv, user_env_file

    if not (isatty(sys.stdin) and isatty(sys.stdout)):
        raise Exit(1, f"flower setup 要在终端里跑;不在终端就手写 {tilde(user_env_file())}(ANTHROPIC_API_KEY=…)")
    configured = user_env_file().is_file() or bool(load_dotenv()) or any(os.environ.get(k) for k in TOKEN_KEYS)
    return 0 if credentials.configure("重新配置。" if configured else "还没配过凭证。") else 1


def cmd_check(args: argparse.Namespace) -> int:
    from ..core.credentials import check_credentials, load_dotenv

    if getattr(args, "guards", False):
        from ..testing.canary import main as canary

        return canary([*(["--cli", args.cli] if args.cli else [])])

    load_dotenv()
    try:
        key = check_credentials()
    except RuntimeError as e:
        print(f"flower: {e}", file=sys.stderr)
        return 2
    print(f"flower: credentials found ({key})")
    return 0


COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {
    "go": cmd_go, "run": cmd_run, "once": cmd_once, "status": cmd_status, "ask": cmd_ask,
    "setup": cmd_setup, "check": cmd_check, "demo": lambda args: asyncio.run(demo()),
    "remote": cmd_remote,
}


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    p = parser()
    args = parse(argv, p)
    try:
        return COMMANDS[args.command](args)
    except Exit as e:
        if e.message:
            try:
                print(f"flower: {e.message}", file=sys.stderr, flush=True)
            except (BrokenPipeError, ValueError):
                pass
        return e.code
    except KeyboardInterrupt:
        print("\nflower: 已取消", file=sys.stderr)
        return 130
    except Exception as e:  # noqa: BLE001 - a user sees one line; -v shows where it came from
        if getattr(args, "verbose", False):
            import traceback

            traceback.print_exc()
        print(f"flower: 出错了:{type(e).__name__}: {one_line(e, 400)}(加 -v 看完整的 traceback)", file=sys.stderr)
        return 1

