"""The subcommands other than ``go``, the table that names them all, and ``main`` that dispatches to them."""

from __future__ import annotations

import argparse
import asyncio
import importlib
import json
import os
import re
import sys
from pathlib import Path
from typing import Any, Callable

from .. import __version__
from . import credentials, places
from .completion import bash_script
from .args import parse, parser
from .demo import cmd_demo
from .drive import drive, finish, install_signals, shown_runtime
from .places import exclude_from_git
from .errors import Exit
from .messages import t
from .go import cmd_go
from .oracle import ask_once
from .remote import cmd_remote
from .screen import EVENTS_FILE, Screen
from .state import read_state, snapshot
from .terminal import OUT, echo, isatty, one_line, reader_gone, tilde


def load_target(target: str) -> Any:
    """``module:attr`` or ``file.py:attr`` → the Workflow (a callable is called once)."""
    from ..workflow import Workflow

    mod, sep, attr = target.rpartition(":")
    if not sep or not mod or not attr:
        raise Exit(1, t("run.want_target"))
    if mod.endswith(".py") or os.sep in mod or "/" in mod:
        path = Path(mod)
        if not path.is_file():
            raise Exit(1, t("run.no_file", mod=mod, cwd=Path.cwd()))
        sys.path.insert(0, str(path.resolve().parent))
        name = path.stem
    else:
        sys.path.insert(0, str(Path.cwd()))
        name = mod
    try:
        module = importlib.import_module(name)
    except Exception as e:  # noqa: BLE001
        raise Exit(1, t("run.import_failed", name=name, error=f"{type(e).__name__}: {one_line(e, 300)}")) from None
    if not hasattr(module, attr):
        raise Exit(1, t("run.no_attr", name=name, attr=attr))
    obj = getattr(module, attr)
    if callable(obj) and not isinstance(obj, Workflow):
        try:
            obj = obj()
        except Exit:
            raise
        except Exception as e:  # noqa: BLE001
            raise Exit(1, t("run.call_failed", target=target, error=f"{type(e).__name__}: {one_line(e, 300)}")) from None
    if not isinstance(obj, Workflow):
        raise Exit(1, t("run.not_workflow", target=target, kind=type(obj).__name__))
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
        raise Exit(2, t("once.fork_needs_resume"))
    screen = Screen(verbose=args.verbose, events_path=rd / EVENTS_FILE)
    credentials.require(args, screen)
    tools = [t.strip() for t in args.tools.split(",") if t.strip()]
    spec = AgentSpec("ad-hoc", args.instructions, allowed_tools=tools, permission_mode=args.permission_mode,
                     max_budget_usd=args.budget)
    runtime = shown_runtime(screen, workspace=ws, run_dir=rd, trim=args.trim, workbench=bool(args.workbench))
    exclude_from_git(ws, rd, ws / ".flower")
    tally = _ToolTally()

    async def go() -> Any:
        install_signals(asyncio.get_running_loop(), runtime, screen, None)
        return await runtime.run(spec, " ".join(args.prompt), step_name="ad-hoc", resume=args.resume,
                                 fork=args.fork, on_event=tally.watch(screen.event))

    try:
        r = asyncio.run(go())
        screen.say(t("once.total", cost=runtime.total_cost(), session=r.session_id, manifest=runtime.manifest_path))
        if not r.ok:
            raise Exit(1, t("once.failed", error=one_line(r.error or t("once.unknown_error"), 300)))
        if tally.denied and not tally.done:
            raise Exit(1, t("once.denied", tools=", ".join(dict.fromkeys(tally.denied))))
        return 0
    finally:
        runtime.close()
        screen.close()


_DENIED = re.compile(r"PreToolUse:\w+ hook error|permission|denied|not allowed|haven't granted|blocked", re.I)


class _ToolTally:
    """What became of the agent's tool calls: denied ones by name, and whether any call went through."""

    def __init__(self) -> None:
        self.names: dict[str, str] = {}
        self.denied: list[str] = []
        self.done = False

    def watch(self, show: Callable[[Any], None]) -> Callable[[Any], None]:
        def on_event(ev: Any) -> None:
            p = ev.payload or {}
            if ev.kind == "tool_call" and p.get("id"):
                self.names[p["id"]] = ev.tool
            elif ev.kind == "tool_result":
                if p.get("is_error") and _DENIED.search(ev.text or ""):
                    self.denied.append(self.names.get(p.get("tool_use_id") or "", "?"))
                elif not p.get("is_error"):
                    self.done = True
            show(ev)

        return on_event


def cmd_status(args: argparse.Namespace) -> int:
    """Read-only: not a byte is written, not even the run dir is created."""
    ws = places.workspace(args, create=False)
    rd = places.run_dir(args, ws, create=False)
    try:
        state = read_state(ws, rd, isolate=args.isolate)
    except (RuntimeError, OSError) as e:
        raise Exit(1, t("status.unreadable", error=one_line(e, 300)))
    if args.json:
        echo(json.dumps(_jsonable(state), ensure_ascii=True, indent=2))
        return 0
    echo(t("status.head", ws=tilde(ws), rd=tilde(rd)))
    if state.get("waking") and state.get("done"):
        nxt = t("status.done")
    elif state.get("waking"):
        nxt = t("status.continue", n=max(1, int(state.get("woke") or 0)))
    else:
        nxt = t("status.fresh")
    echo(t("status.next", what=nxt))
    for line in snapshot(state):
        echo(f"- {line}" if not line.startswith("  ") else f"  {line}")
    if not rd.is_dir():
        echo(t("status.never"))
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

    if not (isatty(sys.stdin) and OUT.isatty()):
        raise Exit(1, t("setup.needs_terminal", path=tilde(user_env_file())))
    configured = user_env_file().is_file() or bool(load_dotenv()) or any(os.environ.get(k) for k in TOKEN_KEYS)
    return 0 if credentials.configure(t("creds.again") if configured else t("creds.not_yet")) else 1


def cmd_check(args: argparse.Namespace) -> int:
    from ..core.credentials import check_credentials, load_dotenv
    from ..core.errors import CredentialsError

    if getattr(args, "guards", False):
        return _check_guards(args.cli)

    load_dotenv()
    try:
        key = check_credentials()
    except CredentialsError as e:
        looked = [t("creds.process_env") if place == "the process environment" else
                  place.replace(" (not set)", t("check.not_set")) for place in e.looked]
        echo("flower: " + t("check.no_creds", looked="; ".join(looked)), err=True)
        return 2
    echo("flower: " + t("creds.found", key=key))
    return 0


def _check_guards(cli: str | None) -> int:
    """The canary (``flower.testing.canary``) run here, its checks named in the person's language; a check that
    failed shows its evidence as the canary found it (what the CLI and the model wrote)."""
    from ..testing.canary import prove_guards

    checks = asyncio.run(prove_guards(cli_path=cli))
    for c in checks:
        title = t(CANARY.get(c.name, "check.guard.unknown"), name=c.name)
        echo(f"{'✓' if c.ok else '✗'} {title}" + ("" if c.ok else f" — {one_line(c.detail, 300)}"))
    return 0 if all(c.ok for c in checks) else 1


CANARY = {
    "the coordinator's Write is denied": "check.guard.delegate",
    "a worker's Write is allowed": "check.guard.worker",
    "a big Bash output is spilled": "check.guard.spill",
    "an isolated dispatch runs in its own git worktree": "check.guard.isolate",
    "setting_sources=[] keeps project settings and CLAUDE.md out": "check.guard.settings",
    "the CLI session ran": "check.guard.session",
}
"""The canary's checks by the names it gives them → the catalogue's words for each."""


def cmd_completion(args: argparse.Namespace) -> int:
    OUT.write(bash_script(parser(), __version__))
    return 0


COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {
    "go": cmd_go, "run": cmd_run, "once": cmd_once, "status": cmd_status, "ask": cmd_ask,
    "setup": cmd_setup, "check": cmd_check, "demo": cmd_demo,
    "remote": cmd_remote, "completion": cmd_completion,
}


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    p = parser()
    args = parse(argv, p)
    try:
        return COMMANDS[args.command](args)
    except BrokenPipeError:
        return reader_gone()
    except Exit as e:
        if e.message:
            try:
                echo(f"flower: {e.message}", err=True, flush=True)
            except (BrokenPipeError, ValueError):
                pass
        return e.code
    except KeyboardInterrupt:
        echo("\nflower: " + t("main.cancelled"), err=True)
        return 130
    except Exception as e:  # noqa: BLE001 - a user sees one line; -v shows where it came from
        if getattr(args, "verbose", False):
            import traceback

            echo(traceback.format_exc().rstrip("\n"), err=True)
        echo("flower: " + t("main.crashed", kind=type(e).__name__, error=one_line(e, 400)), err=True)
        return 1

