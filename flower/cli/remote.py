"""``flower remote``: the same runs, on a flower service — submit an ask and follow it live, answer its
questions at the prompt, Ctrl-C to interrupt; ``list``, ``show``, ``diff``, ``cancel``, ``logs``, ``attach``; and
for scripts ``answer``, ``message``, ``interrupt``, ``delete`` (``remote_tell``).

The service and the token come from ``--server``/``--token``, else ``FLOWER_SERVER``/``FLOWER_TOKEN``, else
``~/.config/flower/remote.toml`` (``flower remote login`` writes it). Only the public API is used.
"""

from __future__ import annotations

import argparse
import asyncio
import getpass
import json
import sys
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeVar

from . import remote_tell
from .errors import Exit
from .messages import name, t
from .terminal import OUT, Style, ask, clean, echo, isatty, one_line, reader_gone

if TYPE_CHECKING:  # the screen and the client are loaded when used, not when argv is parsed
    from ..remote import Remote, RunInfo
    from .screen import Screen

P = TypeVar("P", bound=argparse.ArgumentParser)
ASKED_EXIT = 3
"""``flower remote submit`` without a terminal (and without --wait): the run asked a question nobody here answers."""
ACTIONS = ("login", "submit", "attach", "list", "show", "diff", "cancel", "logs", *remote_tell.VERBS)


def add_parser(sub: "argparse._SubParsersAction[P]") -> P:
    """The ``remote`` subcommand and its own subcommands, on the ``flower`` parser's ``sub``."""
    p = sub.add_parser("remote", help=t("help.remote"), description=t("help.remote.description"),
                       epilog=t("help.remote.exit_status", code=ASKED_EXIT))
    _shared(p, sub=False)
    acts = p.add_subparsers(dest="remote_cmd", metavar="{" + ",".join(ACTIONS) + "}")
    acts.add_parser("login", help=t("help.remote.login"))
    s = acts.add_parser("submit", help=t("help.remote.submit"))
    s.add_argument("ask", nargs="+", help=t("help.remote.ask"))
    s.add_argument("--rounds", type=int, default=None, metavar="N", help=t("help.remote.rounds"))
    s.add_argument("--asks", type=int, default=None, metavar="N", help=t("help.remote.asks"))
    s.add_argument("--timeout", type=float, default=None, metavar="SECONDS", help=t("help.remote.timeout"))
    s.add_argument("--clarify-only", action="store_true", help=t("help.go.clarify_only"))
    s.add_argument("--no-goal", action="store_true", help=t("help.remote.no_goal"))
    s.add_argument("-i", "--instructions", default=None, metavar="TEXT", help=t("help.instructions"))
    s.add_argument("--options", default=None, metavar="JSON", help=t("help.remote.options"))
    s.add_argument("-d", "--detach", action="store_true", help=t("help.remote.detach"))
    s.add_argument("--wait", action="store_true", help=t("help.remote.wait", code=ASKED_EXIT))
    a = acts.add_parser("attach", help=t("help.remote.attach"))
    a.add_argument("run_id", help=t("help.remote.run"))
    ls = acts.add_parser("list", help=t("help.remote.list"))
    ls.add_argument("--status", default=None, help=t("help.remote.status"))
    ls.add_argument("--limit", type=int, default=50)
    sh = acts.add_parser("show", help=t("help.remote.show"))
    sh.add_argument("run_id", help=t("help.remote.run"))
    d = acts.add_parser("diff", help=t("help.remote.diff"))
    d.add_argument("run_id", help=t("help.remote.run"))
    d.add_argument("--files", action="store_true", help=t("help.remote.files"))
    d.add_argument("--path", default=None, metavar="FILE", help=t("help.remote.path"))
    c = acts.add_parser("cancel", help=t("help.remote.cancel"))
    c.add_argument("run_id", help=t("help.remote.run"))
    lg = acts.add_parser("logs", help=t("help.remote.logs"))
    lg.add_argument("run_id", help=t("help.remote.run"))
    lg.add_argument("-f", "--follow", action="store_true", help=t("help.remote.follow"))
    remote_tell.add_parsers(acts)
    for action in acts.choices.values():
        _shared(action, sub=True)
    return p


JSON_HELP = {"list": "help.json", "show": "help.json", "logs": "help.remote.json_lines",
             **{verb: "help.json" for verb in remote_tell.VERBS}}
"""The verbs with JSON output, and the help of their --json."""


def _shared(p: argparse.ArgumentParser, *, sub: bool) -> None:
    """--server, --token and --json on ``flower remote`` and on each of its verbs, so they go before or after the
    verb as people write them (``flower remote login --server URL``); on a verb they default to SUPPRESS."""
    def d(value: object) -> object:
        return argparse.SUPPRESS if sub else value

    verb = p.prog.rsplit(" ", 1)[-1] if sub else ""
    p.add_argument("--server", default=d(None), metavar="URL",
                   help=argparse.SUPPRESS if sub else t("help.remote.server"))
    p.add_argument("--token", default=d(None), metavar="TOKEN",
                   help=argparse.SUPPRESS if sub else t("help.remote.token"))
    json_help = (t(JSON_HELP[verb]) if verb in JSON_HELP else argparse.SUPPRESS) if sub \
        else t("help.remote.json", verbs=", ".join(JSON_HELP))
    p.add_argument("--json", action="store_true", default=d(False), help=json_help)


def cmd_remote(args: argparse.Namespace) -> int:
    from ..remote import BadSetting, RemoteError
    from .follow import said

    if not getattr(args, "remote_cmd", None):
        raise Exit(2, t("remote.needs_action", actions=", ".join(ACTIONS)))
    if args.json and args.remote_cmd not in JSON_HELP:
        raise Exit(2, t("remote.json_where", verb=args.remote_cmd, verbs=", ".join(JSON_HELP)))
    try:
        return asyncio.run(_dispatch(args))
    except (RemoteError, BadSetting) as e:
        raise Exit(1, said(e)) from None
    except ValueError as e:
        raise Exit(1, str(e)) from None



async def _dispatch(args: argparse.Namespace) -> int:
    from ..remote import load_config

    cfg = load_config(args.server, args.token)
    if args.remote_cmd == "login":
        return await _login(cfg.server, cfg.token)
    async with _remote(cfg.server, cfg.token) as api:
        handler: Callable[["Remote", argparse.Namespace], Awaitable[int]] = _HANDLERS[args.remote_cmd]
        return await handler(api, args)


def _remote(server: str, token: str) -> Remote:
    """The client; plain http to another machine is said once, on stderr (the token would be readable)."""
    from ..remote import Remote, check_server, in_the_clear

    checked = check_server(server) if server else ""  # a URL it cannot use, or with credentials in it: refused
    if in_the_clear(checked):
        echo("flower: " + t("remote.in_the_clear", url=checked), err=True)
    return Remote(server, token)


async def _login(server: str, token: str) -> int:
    from ..remote import RemoteConfig, save_config

    tty = isatty(sys.stdin)
    if not server and tty:
        server = ask(t("remote.ask_server")).strip()
    if not token and tty:
        token = getpass.getpass(t("remote.ask_token")).strip()
    async with _remote(server, token) as api:
        runs = await api.runs(limit=1)  # proves both: the server answers, the token is a tenant's
    path = save_config(RemoteConfig(server=api.server, token=token))
    echo("flower: " + t("remote.signed_in", server=api.server, path=path,
                        runs=t("remote.runs_found" if runs else "remote.no_runs_yet")))
    return 0


def _options(args: argparse.Namespace) -> dict[str, Any]:
    opts: dict[str, Any] = {}
    if args.options:
        try:
            extra = json.loads(args.options)
        except json.JSONDecodeError as e:
            raise ValueError(t("remote.options_not_json", why=e.msg)) from None
        if not isinstance(extra, dict):
            raise ValueError(t("remote.options_not_object"))
        opts.update(extra)
    for key, value in (("rounds", args.rounds), ("max_asks", args.asks), ("timeout_s", args.timeout),
                       ("instructions", args.instructions)):
        if value is not None:
            opts[key] = value
    if args.clarify_only:
        opts["clarify_only"] = True
    if args.no_goal:
        opts["goal"] = False
    return opts


async def _submit(api: Remote, args: argparse.Namespace) -> int:
    ask = " ".join(args.ask).strip()
    if not ask:
        raise ValueError(t("remote.blank_ask"))
    run = await api.submit(ask, _options(args))
    if args.detach:
        echo(run.id)
        return 0
    from .screen import Screen

    screen = Screen(verbose=getattr(args, "verbose", False))
    screen.say(t("remote.submitted", run=run.id, server=api.server, status=run.status, short=run.short or run.id))
    return await _follow_to_end(api, run.id, screen, wait=args.wait)


async def _attach(api: Remote, args: argparse.Namespace) -> int:
    from .screen import Screen

    screen = Screen(verbose=getattr(args, "verbose", False))
    run = await api.run(args.run_id)
    screen.say(t("remote.attached", run=run.id, server=api.server, status=run.status))
    return await _follow_to_end(api, run.id, screen)


async def _follow_to_end(api: Remote, run_id: str, screen: Screen, *, wait: bool = True) -> int:
    from .follow import follow

    alone = not (isatty(sys.stdin) and screen.tty)
    if alone:
        screen.say(t("remote.no_terminal", run=run_id))
    try:
        final = await follow(api, run_id, screen=screen, until_asked=alone and not wait)
    finally:
        screen.close()
    if not final.ended_already and alone and not wait:
        raise Exit(ASKED_EXIT, t("remote.no_tty_exit", run=run_id, code=ASKED_EXIT))
    return _summary(final, screen)


def _summary(run: RunInfo, screen: Screen) -> int:
    if not run.ended_already:
        return 0  # stopped following; the run goes on
    files = len(run.diffstat.files) if run.diffstat else 0
    tail = t("remote.changed_files", n=files, branch=run.branch, run=run.id) if files else ""
    mark = "+" if run.status == "succeeded" else "x"
    why = f": {one_line(run.error, 300)}" if run.error else ""
    screen.say(t("remote.ended", mark=mark, run=run.id, status=run.status, why=why, cost=run.cost_usd, tail=tail))
    return 0 if run.status == "succeeded" else 1


async def _list(api: Remote, args: argparse.Namespace) -> int:
    runs = await api.runs(status=args.status, limit=args.limit)
    if args.json:
        import msgspec

        echo(_json(msgspec.to_builtins(runs)))
        return 0
    if not runs:
        echo(t("remote.none"))
        return 0
    for r in runs:
        echo(f"{r.short or r.id}  {r.status:<10} ${r.cost_usd:>8.4f}  {name(r.step or '-'):<8}  {one_line(r.ask, 60):<60}"
             + (f"  {r.id}" if r.short else ""))
    return 0


async def _show(api: Remote, args: argparse.Namespace) -> int:
    import msgspec

    run = await api.run(args.run_id)
    questions = await api.questions(run.id) if not run.ended_already else []
    if args.json:
        echo(_json({**msgspec.to_builtins(run), "questions": msgspec.to_builtins(questions)}, indent=2))
        return 0
    rows = [("run", run.id), *([("short", run.short)] if run.short else []),
            ("status", run.status + (t("remote.cancel_requested") if run.cancel_requested else "")),
            ("ask", one_line(run.ask, 200)), ("step", name(run.step or "-")), ("cost", f"${run.cost_usd:.4f}"),
            ("events", str(run.events)), ("branch", run.branch or "-"), ("base", run.base or "-"),
            ("commit", run.commit or "-"), ("created", run.created or "-"), ("started", run.started or "-"),
            ("ended", run.ended or "-")]
    if run.parked_at:
        rows.append(("parked", t("remote.parked_since", at=run.parked_at)))
    if run.sandboxes > 1:
        rows.append(("resumed", t("remote.resumed_times", n=run.sandboxes - 1)))
    for loss in run.losses:
        rows.append(("lost", f"{loss.cause} {loss.at} · {one_line(loss.place or '-', 80)} · {one_line(loss.error, 200)}"))
    if run.waiting:
        rows.append(("waiting", one_line(run.waiting, 300)))
    if run.fired_by is not None:
        fired = run.fired_by
        rows.insert(2, ("fired", f"{fired.by} {clean(fired.schedule)}"
                                    + (f" ({clean(fired.tick)})" if fired.by == "schedule" and fired.tick else "")))
    if run.error:
        rows.append(("error", one_line(run.error, 300)))
    for key, value in rows:
        echo(f"{_field(key)}  {value}")
    if run.diffstat and run.diffstat.files:
        echo(f"{_field('changed')}  +{run.diffstat.insertions} -{run.diffstat.deletions}")
        for f in run.diffstat.files:
            echo(f"{_field('')}  {clean(f.path)}  +{f.insertions} -{f.deletions}")
    for q in questions:
        echo(f"{_field('question')}  {one_line(q.question, 200)}  [{q.id}]")
        for i, opt in enumerate(q.options, 1):
            echo(f"{_field('')}    {i}) {clean(opt)}")
    return 0


def _field(key: str) -> str:
    """A row name of ``show``, right-aligned in eight columns (a Chinese character takes two)."""
    label = t("remote.field." + key) if key else ""
    return " " * max(0, 8 - sum(2 if ord(c) > 0x2e7f else 1 for c in label)) + label


_COLOURS = (("diff --git", Style.BOLD), ("+++", Style.BOLD), ("---", Style.BOLD), ("@@", Style.CYAN),
            ("+", Style.GREEN), ("-", Style.RED))


async def _diff(api: Remote, args: argparse.Namespace) -> int:
    """Printed as it streams: a diff is never held whole here either."""
    if args.files:
        listed = await api.diff_files(args.run_id)
        for f in listed.files:
            OUT.line(f"{t('remote.binary') if f.binary else f'+{f.insertions} -{f.deletions}':>16}  {f.path}")
        if listed.truncated:
            echo(t("remote.more_files", branch=listed.branch), err=True)
        return 0
    colour, empty = OUT.isatty(), True
    async for line in api.diff_lines(args.run_id, path=args.path):
        empty = False
        safe = clean(line.rstrip("\n"))
        OUT.line(safe, style=next((c for head, c in _COLOURS if safe.startswith(head)), None) if colour else None)
    if empty:
        echo(t("remote.unchanged", run=args.run_id), err=True)
    return 0


async def _cancel(api: Remote, args: argparse.Namespace) -> int:
    run = await api.cancel(args.run_id)
    echo(t("remote.cancelled", run=run.id, status=run.status) + ("" if run.ended_already else t("remote.stopping")))
    return 0


async def _logs(api: Remote, args: argparse.Namespace) -> int:
    from ..remote import StreamEnd
    from .follow import RemoteView
    from .screen import Screen

    run = await api.run(args.run_id)
    upto = None if args.follow or run.ended_already else run.events  # a live run without -f: what it has so far
    screen = Screen(verbose=getattr(args, "verbose", False))
    view = RemoteView(screen)
    if upto == 0:
        return 0
    try:
        async for item in api.events(run.id):
            if isinstance(item, StreamEnd):
                break
            if args.json:
                import msgspec

                echo(_json(msgspec.to_builtins(item)), flush=True)
            else:
                view.show(item)
                if screen.gone:  # `logs -f | head`: no one reads on, so nothing is followed on
                    return reader_gone()
            if upto is not None and item.seq >= upto:
                break
    finally:
        screen.close()
    return 0


def _json(value: object, *, indent: int | None = None) -> str:
    """JSON for a terminal or a pipe: every character past ASCII escaped, so the data survives whole and the
    terminal is handed nothing it would obey."""
    return json.dumps(value, ensure_ascii=True, indent=indent)


_HANDLERS: dict[str, Callable[["Remote", argparse.Namespace], Awaitable[int]]] = {
    "submit": _submit, "attach": _attach, "list": _list, "show": _show, "diff": _diff, "cancel": _cancel,
    "logs": _logs, "answer": remote_tell.answer, "message": remote_tell.message, "interrupt": remote_tell.interrupt,
    "delete": remote_tell.delete,
}
