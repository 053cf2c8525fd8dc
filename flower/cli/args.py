"""argv → Namespace: the subcommands and their flags, ``go`` when none is written, mistakes in one line."""

from __future__ import annotations

import argparse
import math
import re
from typing import Any, Callable, TypeVar

from .. import __version__
from . import remote
from .completion import SHELLS
from .messages import t


CMDS = ("go", "run", "once", "status", "ask", "setup", "check", "demo", "remote", "completion")
"""Words that name a subcommand; any other first word is the ask of ``go`` (``flower go run`` asks "run")."""
PERMISSION_MODES = ("default", "acceptEdits", "plan", "bypassPermissions")


class _Formatter(argparse.HelpFormatter):
    def add_usage(self, usage: Any, actions: Any, groups: Any, prefix: str | None = None) -> None:
        super().add_usage(usage, actions, groups, t("help.usage") if prefix is None else prefix)


class _RawFormatter(argparse.RawDescriptionHelpFormatter, _Formatter):
    pass


class _Parser(argparse.ArgumentParser):
    """Argument mistakes come out as one line (exit 2), not a usage block; help in the user's language."""

    def __init__(self, *args: Any, **kw: Any) -> None:
        kw.setdefault("formatter_class", _Formatter)
        super().__init__(*args, **{**kw, "add_help": False})
        self._positionals.title, self._optionals.title = t("help.positionals"), t("help.options")
        self.add_argument("-h", "--help", action="help", default=argparse.SUPPRESS, help=t("help.help"))

    def error(self, message: str) -> None:  # type: ignore[override]
        for en, key in (("unrecognized arguments: ", "arg.unrecognized"),
                        ("the following arguments are required: ", "arg.required"),
                        ("expected one argument", "arg.one_value"), ("invalid choice: ", "arg.invalid_choice")):
            message = message.replace(en, t(key))
        message = re.sub(r"^argument ([^:]+): ", lambda m: m[1].split("/")[-1] + " ", message)
        self.exit(2, f"flower: {message}{t('arg.see_help', prog=self.prog)}\n")


T = TypeVar("T")

def _convert(text: str, kind: Callable[[str], T], wanted: str) -> T:
    """``kind(text)``, or the complaint argparse prints in its one line: what was wanted, what came."""
    try:
        return kind(text)
    except ValueError:
        raise argparse.ArgumentTypeError(t(wanted, text=text)) from None


def _whole(minimum: int | None = None) -> Callable[[str], int]:
    """An integer flag; argparse puts the flag's name in front of the complaint."""

    def parse(text: str) -> int:
        value = _convert(text, int, "arg.want_int")
        if minimum is not None and value < minimum:
            raise argparse.ArgumentTypeError(t("arg.at_least", minimum=minimum, value=value))
        return value

    return parse


def _seconds(text: str) -> float:
    """--timeout: seconds; 0 or negative = nobody waits; ``inf`` = wait forever."""
    value = _convert(text, float, "arg.want_seconds")
    if math.isnan(value):
        raise argparse.ArgumentTypeError(t("arg.nan"))
    return value


def _dollars(text: str) -> float:
    value = _convert(text, float, "arg.want_dollars")
    if not value > 0 or math.isinf(value):
        raise argparse.ArgumentTypeError(t("arg.positive_dollars", text=text))
    return value


def _add_globals(p: argparse.ArgumentParser, *, sub: bool) -> None:
    """The five global flags; on a subcommand they default to SUPPRESS so either position works."""

    def d(value: Any) -> Any:
        return argparse.SUPPRESS if sub else value

    help_ = (lambda key: argparse.SUPPRESS) if sub else t
    p.add_argument("-w", "--workspace", default=d("."), metavar="PATH", help=help_("help.workspace"))
    p.add_argument("-r", "--run-dir", default=d(None), metavar="DIR", help=help_("help.run_dir"))
    p.add_argument("-v", "--verbose", action="store_true", default=d(False), help=help_("help.verbose"))
    p.add_argument("-W", "--workbench", action="store_true", default=d(False), help=help_("help.workbench"))
    p.add_argument("-T", "--trim", action="store_true", default=d(False), help=help_("help.trim"))


def parser() -> argparse.ArgumentParser:
    p = _Parser(prog="flower", description=t("help.description"), formatter_class=_RawFormatter)
    p.add_argument("--version", action="version", version=f"flower {__version__}", help=t("help.version"))
    _add_globals(p, sub=False)
    sub = p.add_subparsers(dest="command", metavar="{" + ",".join(CMDS) + "}", title=t("help.commands"),
                           parser_class=_Parser)

    go = sub.add_parser("go", help=t("help.go"), description=t("help.go.description"))
    go.add_argument("ask", nargs="*", help=t("help.go.ask"))
    go.add_argument("--asks", type=_whole(), default=-1, metavar="N", help=t("help.go.asks"))
    go.add_argument("--rounds", type=_whole(1), default=3, metavar="N", help=t("help.go.rounds"))
    go.add_argument("--no-goal", action="store_true", help=t("help.go.no_goal"))
    go.add_argument("--judge-can-run", action="store_true", help=t("help.go.judge_can_run"))
    go.add_argument("--timeout", type=_seconds, default=1800.0, metavar="SECONDS", help=t("help.go.timeout"))
    go.add_argument("--isolate", action="store_true", help=t("help.go.isolate"))
    go.add_argument("--window", type=_whole(1), default=None, metavar="N", help=t("help.go.window"))
    go.add_argument("--no-handoff", action="store_true", help=t("help.go.no_handoff"))
    go.add_argument("--new", action="store_true", help=t("help.go.new"))
    go.add_argument("--clarify-only", action="store_true", help=t("help.go.clarify_only"))
    go.add_argument("--no-trim", action="store_true", help=t("help.go.no_trim"))
    go.add_argument("-i", "--instructions", default="", metavar="TEXT", help=t("help.instructions"))

    run = sub.add_parser("run", help=t("help.run"), description=t("help.run.description"))
    run.add_argument("target", help=t("help.run.target"))

    once = sub.add_parser("once", help=t("help.once"))
    once.add_argument("prompt", nargs="+", help=t("help.once.prompt"))
    once.add_argument("-i", "--instructions", default="", metavar="TEXT", help=t("help.instructions"))
    once.add_argument("-t", "--tools", default="Read,Glob,Grep", metavar="LIST", help=t("help.once.tools"))
    once.add_argument("-p", "--permission-mode", default="default", choices=PERMISSION_MODES,
                      help=t("help.once.permission_mode"))
    once.add_argument("-b", "--budget", type=_dollars, default=None, metavar="USD", help=t("help.once.budget"))
    once.add_argument("--resume", default=None, metavar="SESSION_ID", help=t("help.once.resume"))
    once.add_argument("--fork", action="store_true", help=t("help.once.fork"))

    status = sub.add_parser("status", help=t("help.status"))
    status.add_argument("--json", action="store_true", help=t("help.json"))
    status.add_argument("--isolate", action="store_true", help=t("help.status.isolate"))

    ask = sub.add_parser("ask", help=t("help.ask"))
    ask.add_argument("question", nargs="+", help=t("help.ask.question"))
    ask.add_argument("--isolate", action="store_true", help=t("help.status.isolate"))

    sub.add_parser("setup", help=t("help.setup"))
    check = sub.add_parser("check", help=t("help.check"))
    check.add_argument("--guards", action="store_true", help=t("help.check.guards"))
    check.add_argument("--cli", help=t("help.check.cli"))
    demo = sub.add_parser("demo", help=t("help.demo"))
    demo.add_argument("-y", "--yes", action="store_true", help=t("help.demo.yes"))
    demo.add_argument("--keep", action="store_true", help=t("help.demo.keep"))
    demo.add_argument("--here", action="store_true", help=t("help.demo.here"))
    remote.add_parser(sub)
    sub.add_parser("completion", help=t("help.completion")).add_argument("shell", choices=SHELLS,
                                                                       help=t("help.completion.shell"))
    for action in sub.choices.values():
        _add_globals(action, sub=True)
    p.epilog = t("help.epilog") + "\n" + _flag_lines(go)
    return p


def _flag_lines(p: argparse.ArgumentParser) -> str:
    """The go flags, one per line, for ``flower --help``: go is what a bare ``flower`` runs."""
    lines = []
    for action in p._actions:
        if not action.option_strings or action.help in (None, argparse.SUPPRESS) or "-h" in action.option_strings:
            continue
        name = ", ".join(action.option_strings) + (f" {action.metavar}" if action.metavar else "")
        lines.append(f"  {name:<22} {action.help}")
    return "\n".join(lines)


def with_default_cmd(argv: list[str], p: argparse.ArgumentParser | None = None) -> list[str]:
    """Insert ``go`` where the user wrote none: before the first word that is not a global flag."""
    if "-h" in argv or "--help" in argv:
        return list(argv)
    p = p or parser()
    takes_value: dict[str, bool] = {}
    for action in p._actions:
        if isinstance(action, argparse._SubParsersAction):
            continue
        for opt in action.option_strings:
            takes_value[opt] = action.nargs != 0
    i = 0
    while i < len(argv):
        tok = argv[i]
        name = tok.split("=", 1)[0] if tok.startswith("--") else tok
        if name not in takes_value:
            break
        if takes_value[name] and "=" not in tok and i + 1 >= len(argv):
            return list(argv)  # the flag's value is missing: argparse says so
        i += 2 if takes_value[name] and "=" not in tok else 1
    if i >= len(argv):
        return [*argv, "go"]
    if argv[i] in CMDS:
        return list(argv)
    return [*argv[:i], "go", *argv[i:]]


def parse(argv: list[str], p: argparse.ArgumentParser | None = None) -> argparse.Namespace:
    """argv → Namespace; words of the ask may sit between flags (``flower 做 --rounds 2 一个 X``)."""
    p = p or parser()
    args, extra = p.parse_known_args(with_default_cmd(argv, p))
    if args.command is None:
        p.error("the following arguments are required: command")
    if extra:
        flags = [x for x in extra if x.startswith("-") and x != "-"]
        if args.command != "go" or flags:
            p.error(f"unrecognized arguments: {' '.join(flags or extra)}")
        args.ask = [*args.ask, *extra]
    return args
