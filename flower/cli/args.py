"""argv → Namespace: the subcommands and their flags, ``go`` when none is written, mistakes in one line."""

from __future__ import annotations

import argparse
import math
import re
from typing import Any, Callable, TypeVar

from .. import __version__
from . import remote


CMDS = ("go", "run", "once", "status", "ask", "setup", "check", "demo", "remote")
"""Words that name a subcommand; any other first word is the ask of ``go`` (``flower go run`` asks "run")."""
PERMISSION_MODES = ("default", "acceptEdits", "plan", "bypassPermissions")


class _Parser(argparse.ArgumentParser):
    """Argument mistakes come out as one line (exit 2), not a usage block."""

    def error(self, message: str) -> None:  # type: ignore[override]
        for en, zh in (("unrecognized arguments: ", "不认识的参数:"),
                       ("the following arguments are required: ", "缺少参数:"),
                       ("expected one argument", "后面要跟一个值")):
            message = message.replace(en, zh)
        message = re.sub(r"^argument ([^:]+): ", lambda m: m[1].split("/")[-1] + " ", message)
        self.exit(2, f"flower: {message}({self.prog} --help 看用法)\n")


T = TypeVar("T")

def _convert(text: str, kind: Callable[[str], T], wanted: str) -> T:
    """``kind(text)``, or the complaint argparse prints in its one line: what was wanted, what came."""
    try:
        return kind(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{wanted},收到的是 {text!r}") from None


def _whole(minimum: int | None = None) -> Callable[[str], int]:
    """An integer flag; argparse puts the flag's name in front of the complaint."""

    def parse(text: str) -> int:
        value = _convert(text, int, "要一个整数")
        if minimum is not None and value < minimum:
            raise argparse.ArgumentTypeError(f"至少是 {minimum},收到的是 {value}")
        return value

    return parse


def _seconds(text: str) -> float:
    """--timeout: seconds; 0 or negative = nobody waits; ``inf`` = wait forever."""
    value = _convert(text, float, "要秒数(0 = 全自动,不等人)")
    if math.isnan(value):
        raise argparse.ArgumentTypeError("要秒数,nan 不算")
    return value


def _dollars(text: str) -> float:
    value = _convert(text, float, "要美元金额")
    if not value > 0 or math.isinf(value):
        raise argparse.ArgumentTypeError(f"要大于 0 的美元金额,收到的是 {text}")
    return value


def _add_globals(p: argparse.ArgumentParser, *, sub: bool) -> None:
    """The five global flags; on a subcommand they default to SUPPRESS so either position works."""

    def d(value: Any) -> Any:
        return argparse.SUPPRESS if sub else value

    help_ = (lambda text: argparse.SUPPRESS) if sub else (lambda text: text)
    p.add_argument("-w", "--workspace", default=d("."), metavar="PATH",
                   help=help_("agent 的工作目录(默认当前目录,不存在就建)"))
    p.add_argument("-r", "--run-dir", default=d(None), metavar="DIR",
                   help=help_("会话库与运行清单的位置(默认 <工作目录>/runs;相对路径按当前目录算)"))
    p.add_argument("-v", "--verbose", action="store_true", default=d(False),
                   help=help_("多打一些:subagent 正文、全部工具结果、prompt、生效的凭证(打码)"))
    p.add_argument("-W", "--workbench", action="store_true", default=d(False),
                   help=help_("开工作台(run/once;go 总是带自己的工作台)"))
    p.add_argument("-T", "--trim", action="store_true", default=d(False),
                   help=help_("resume 时把旧的大工具结果换成文件指针(run/once;go 默认就开,用 --no-trim 关)"))


def parser() -> argparse.ArgumentParser:
    p = _Parser(prog="flower", description="在 claude-agent-sdk 上跑长程编码 agent。"
                "不写子命令就是 go:flower \"帮我做一个 X\"。",
                epilog="子命令的开关写在诉求前后都行;全局开关(-w/-r/-v/-W/-T)写在哪都行。")
    p.add_argument("--version", action="version", version=f"flower {__version__}")
    _add_globals(p, sub=False)
    sub = p.add_subparsers(dest="command", metavar="{" + ",".join(CMDS) + "}")

    go = sub.add_parser("go", help="一键跑:问清需求 → 设定目标 → 派人干活,每轮独立判定(不写子命令时的默认)",
                        description="问清需求 → 设定目标 → 干活,每轮由独立的判定者判\"做完了没有\"。"
                        "同一个目录再跑一次就接着上次。全局开关(-w/-r/-v/-W/-T)见 flower --help。")
    go.add_argument("ask", nargs="*", help="诉求;不给就在终端里问你(或者从管道读)")
    go.add_argument("--asks", type=_whole(), default=-1, metavar="N",
                    help="提问额度:负数 = 不限(默认),0 = 不许提问,N = 硬额度")
    go.add_argument("--rounds", type=_whole(1), default=3, metavar="N",
                    help="干活的总轮数上限(默认 3);每轮结束由独立判定者判,没达成就打回去接着做")
    go.add_argument("--no-goal", action="store_true", help="关掉目标看守:不设目标、不判定,干完就算完")
    go.add_argument("--judge-can-run", action="store_true", help="让判定者能跑命令(判定更硬,但它能改动工作区)")
    go.add_argument("--timeout", type=_seconds, default=1800.0, metavar="SECONDS",
                    help="等人回答多久(默认 1800);0 = 全自动,提问立刻落空;inf = 一直等")
    go.add_argument("--isolate", action="store_true",
                    help="每个 subagent 分一份 git worktree(工作目录必须是 git 仓库);工作台挪到仓库外")
    go.add_argument("--window", type=_whole(1), default=None, metavar="N",
                    help="模型上下文窗口(默认按模型名推断:100 万,haiku 20 万);到 窗口−50000 写交接书换新会话")
    go.add_argument("--no-handoff", action="store_true", help="关掉换代,退回 SDK 自带的 compact")
    go.add_argument("--new", action="store_true",
                    help="这次别接上次:上一段的需求/目标/血缘挪进存档(不删),从头开始")
    go.add_argument("--clarify-only", action="store_true", help="只问清需求,不往下干活")
    go.add_argument("--no-trim", action="store_true", help="关掉裁剪(go 默认开)")
    go.add_argument("-i", "--instructions", default="", metavar="TEXT", help="领域指令,叠加在原生系统提示之后")

    run = sub.add_parser("run", help="运行一个你写的 workflow", description="运行一个 workflow:模块:属性 或 文件.py:属性。")
    run.add_argument("target", help="例如 flows.py:main 或 mypkg.flows:build")

    once = sub.add_parser("once", help="跑一次单 agent(不走流程,不判定)")
    once.add_argument("prompt", nargs="+", help="给它的话")
    once.add_argument("-i", "--instructions", default="", metavar="TEXT", help="领域指令,叠加在原生系统提示之后")
    once.add_argument("-t", "--tools", default="Read,Glob,Grep", metavar="LIST", help="逗号分隔的工具白名单")
    once.add_argument("-p", "--permission-mode", default="default", choices=PERMISSION_MODES)
    once.add_argument("-b", "--budget", type=_dollars, default=None, metavar="USD", help="美元预算上限")
    once.add_argument("--resume", default=None, metavar="SESSION_ID", help="接着一个已有的会话")
    once.add_argument("--fork", action="store_true", help="和 --resume 一起用:分叉而不是接着")

    status = sub.add_parser("status", help="看这个目录的唤醒状态(只读,一个字节都不写)")
    status.add_argument("--json", action="store_true", help="以 JSON 输出")
    status.add_argument("--isolate", action="store_true", help="这次运行用的是 --isolate(工作台在仓库外)")

    ask = sub.add_parser("ask", help="旁路问答:问一句\"到哪了\",答完即弃,不进运行的上下文")
    ask.add_argument("question", nargs="+", help="要问的话")
    ask.add_argument("--isolate", action="store_true", help="这次运行用的是 --isolate(工作台在仓库外)")

    sub.add_parser("setup", help="配置凭证(API key / 网关 / 模型),写到 ~/.config/flower/.env")
    check = sub.add_parser("check", help="看看能不能找到凭证(不联网)")
    check.add_argument("--guards", action="store_true",
                       help="offline: prove through the CLI that every guard holds (✓/✗ per guard)")
    check.add_argument("--cli", help="with --guards: the Claude Code CLI to prove (default: the bundled one)")
    sub.add_parser("demo", help="离线跑一个真实 CLI 会话(对着脚本模型)")
    remote.add_parser(sub)
    for action in sub.choices.values():
        _add_globals(action, sub=True)
    return p


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
