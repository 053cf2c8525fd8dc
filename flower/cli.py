"""The `flower` command: `flower "an ask"` runs the starter flow here; `flower` again continues it.

Subcommands (``go`` is the default when none is written — ``flower "做 X"`` is ``flower go "做 X"``):

    go      clarify → set the goal → work, judged every round (the starter flow)
    run     a workflow you wrote: ``flower run flows.py:main``
    once    one agent, once: ``flower once "读一眼这个仓库"``
    status  the wake state of this folder, read-only (``--json`` for machines)
    ask     the oracle: ``flower ask "到哪一步了?"`` — a fresh session that never enters the run
    setup   write credentials to ~/.config/flower/.env
    check   are credentials found (no network)
    demo    one real-CLI session against the offline scripted model

Global flags (before or after the subcommand): ``-w`` workspace, ``-r`` run dir, ``-v``, ``-W``, ``-T``.
Mid-run, the last line of the terminal always takes input: an answer when a question waits, else a
message for the agent's inbox; a line starting with ``?`` asks the oracle. Ctrl-C interrupts the
round and lets you say something; SIGTERM/SIGHUP put the step in flight into the manifest, then exit.
"""

from __future__ import annotations

import argparse
import asyncio
import atexit
import codecs
import collections
import importlib
import json
import math
import os
import re
import select
import shutil
import signal
import subprocess
import sys
import threading
import time
import unicodedata
from pathlib import Path
from typing import Any, Callable, TextIO

from . import __version__

CMDS = ("go", "run", "once", "status", "ask", "setup", "check", "demo")
"""Words that name a subcommand; any other first word is the ask of ``go`` (``flower go run`` asks "run")."""

NO_CREDS = ("缺少凭证:把 ANTHROPIC_API_KEY 或 ANTHROPIC_AUTH_TOKEN export 进环境,或写进 ./.env 或 "
            "~/.config/flower/.env(在终端里跑 `flower setup` 会帮你写)")
EMPTY_ASK = "诉求是空的。直接 `flower` 然后按提示输入,或者 flower \"帮我做一个 X\"。"
FRESH_PROMPT = "要做什么? 一句话就够,回车开始(Ctrl-C 退出)"
WAKE_PROMPT = "接着上次? 直接回车 = 接着做;也可以说点新的;/new = 重开一件事(Ctrl-C 退出)"
PROMPT_ANSWER = "你的回答 (回车=跳过,让它自己判断) > "
PROMPT_IDLE = "(直接说 = 加需求,下个检查点送达;? 开头 = 顺便问一句,不打扰它干活) > "
PROMPT_INTERRUPT = "要说什么 (直接回车 = 只打断,接着跑) > "
ORACLE_WINDOW = 60
ORACLE_WAIT_S = 120.0
EVENT_TEXT_MAX = 200
EVENTS_FILE = "events.jsonl"
PERMISSION_MODES = ("default", "acceptEdits", "plan", "bypassPermissions")


class Exit(Exception):
    """A deliberate exit: one line to stderr, no traceback."""

    def __init__(self, code: int, message: str = "") -> None:
        super().__init__(message)
        self.code, self.message = code, message


# -- argv --------------------------------------------------------------------------------------
class _Parser(argparse.ArgumentParser):
    """Argument mistakes come out as one line (exit 2), not a usage block."""

    def error(self, message: str) -> None:  # type: ignore[override]
        for en, zh in (("unrecognized arguments: ", "不认识的参数:"),
                       ("the following arguments are required: ", "缺少参数:"),
                       ("expected one argument", "后面要跟一个值")):
            message = message.replace(en, zh)
        message = re.sub(r"^argument ([^:]+): ", lambda m: m[1].split("/")[-1] + " ", message)
        self.exit(2, f"flower: {message}({self.prog} --help 看用法)\n")


def _whole(flag: str, *, minimum: int | None = None) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"要一个整数,收到的是 {text!r}") from None
        if minimum is not None and value < minimum:
            raise argparse.ArgumentTypeError(f"至少是 {minimum},收到的是 {value}")
        return value

    parse.__name__ = flag
    return parse


def _seconds(text: str) -> float:
    """--timeout: seconds; 0 or negative = nobody waits; ``inf`` = wait forever."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"要秒数(0 = 全自动,不等人),收到的是 {text!r}") from None
    if math.isnan(value):
        raise argparse.ArgumentTypeError("要秒数,nan 不算")
    return value


def _dollars(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"要美元金额,收到的是 {text!r}") from None
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
    sub = p.add_subparsers(dest="command", metavar="{go,run,once,status,ask,setup,check,demo}")

    go = sub.add_parser("go", help="一键跑:问清需求 → 设定目标 → 派人干活,每轮独立判定(不写子命令时的默认)",
                        description="问清需求 → 设定目标 → 干活,每轮由独立的判定者判\"做完了没有\"。"
                        "同一个目录再跑一次就接着上次。全局开关(-w/-r/-v/-W/-T)见 flower --help。")
    go.add_argument("ask", nargs="*", help="诉求;不给就在终端里问你(或者从管道读)")
    go.add_argument("--asks", type=_whole("--asks"), default=-1, metavar="N",
                    help="提问额度:负数 = 不限(默认),0 = 不许提问,N = 硬额度")
    go.add_argument("--rounds", type=_whole("--rounds", minimum=1), default=3, metavar="N",
                    help="干活的总轮数上限(默认 3);每轮结束由独立判定者判,没达成就打回去接着做")
    go.add_argument("--no-goal", action="store_true", help="关掉目标看守:不设目标、不判定,干完就算完")
    go.add_argument("--judge-can-run", action="store_true", help="让判定者能跑命令(判定更硬,但它能改动工作区)")
    go.add_argument("--timeout", type=_seconds, default=1800.0, metavar="SECONDS",
                    help="等人回答多久(默认 1800);0 = 全自动,提问立刻落空;inf = 一直等")
    go.add_argument("--isolate", action="store_true",
                    help="每个 subagent 分一份 git worktree(工作目录必须是 git 仓库);工作台挪到仓库外")
    go.add_argument("--window", type=_whole("--window", minimum=1), default=None, metavar="N",
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
    sub.add_parser("check", help="看看能不能找到凭证(不联网)")
    sub.add_parser("demo", help="离线跑一个真实 CLI 会话(对着脚本模型)")
    for name, action in sub.choices.items():
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


# -- the screen --------------------------------------------------------------------------------
_ESC = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?|\x1b[@-Z\\-_]")
_CTRL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")


def clean(text: Any) -> str:
    """Text from the model or a tool, safe for a terminal: escape sequences and control characters go."""
    return _CTRL.sub("", _ESC.sub("", str(text or "")).replace("\r\n", "\n").replace("\r", "\n"))


def _cols(text: str) -> int:
    return sum(2 if unicodedata.east_asian_width(c) in "WF" else 1 for c in text)


def _one_line(text: Any, limit: int = 160) -> str:
    s = " ".join(clean(text).split())
    return s if len(s) <= limit else s[: limit - 1] + "…"


def _k(tokens: int) -> str:
    return f"{tokens / 1000:.1f}K" if tokens < 1_000_000 else f"{tokens / 1_000_000:.2f}M"


def _home(path: Path | str) -> str:
    s, home = str(path), str(Path.home())
    return "~" + s[len(home):] if home not in ("", "/") and (s == home or s.startswith(home + os.sep)) else s


class Screen:
    """Every line flower prints goes through ``say``: one lock, and a prompt kept on the last line."""

    def __init__(self, *, verbose: bool = False, out: TextIO | None = None, events_path: Path | None = None,
                 brief_path: Path | None = None) -> None:
        self.verbose = verbose
        self.out = out or sys.stdout
        self.tty = _isatty(self.out)
        self.width = max(40, min(shutil.get_terminal_size((100, 24)).columns, 110))
        self.brief_path = brief_path
        self.prompt: Callable[[], str | None] = lambda: None
        self.recent: collections.deque[str] = collections.deque(maxlen=ORACLE_WINDOW)
        self.label = ""  # the attempt running now (step, step#round2, step·判定#1 …)
        self.cost = 0.0
        self.errors: list[str] = []
        self._lock = threading.RLock()
        self._prompt_shown = False
        self._prompt_rows = 0
        self._seen_asks: set[str] = set()
        self._tools: dict[str, str] = {}
        self._events = None
        if events_path is not None:
            try:
                events_path.parent.mkdir(parents=True, exist_ok=True)
                self._events = open(events_path, "a", encoding="utf-8", buffering=1)
            except OSError:
                self._events = None

    # -- output ------------------------------------------------------------------------
    def say(self, text: str = "", *, err: bool = False) -> None:
        """Print a line above the prompt: erase the prompt, print, draw the prompt again."""
        with self._lock:
            try:
                self._erase()
                stream = sys.stderr if err else self.out
                stream.write(text + "\n")
                stream.flush()
                self._draw_prompt()
            except (BrokenPipeError, ValueError, OSError):
                pass

    def refresh(self) -> None:
        """Redraw the prompt (its text changed: a question arrived or was settled, a key was typed)."""
        with self._lock:
            try:
                self._erase()
                self._draw_prompt()
            except (BrokenPipeError, ValueError, OSError):
                pass

    def hide_prompt(self) -> None:
        with self._lock:
            self.prompt = lambda: None
            try:
                self._erase()
            except (BrokenPipeError, ValueError, OSError):
                pass

    def _erase(self) -> None:
        if self._prompt_shown:
            up = self._prompt_rows
            self.out.write("\r" + (f"\x1b[{up}A" if up else "") + "\x1b[J")
            self.out.flush()
            self._prompt_shown = False

    def _draw_prompt(self) -> None:
        text = self.prompt() if self.tty else None
        if text:
            columns = shutil.get_terminal_size((100, 24)).columns or 100
            self._prompt_rows = max(0, (_cols(text) - 1) // columns)  # a long prompt wraps
            self.out.write(text)
            self.out.flush()
            self._prompt_shown = True

    def close(self) -> None:
        self.hide_prompt()
        if self._events is not None:
            try:
                self._events.close()
            except OSError:
                pass
            self._events = None

    # -- events ------------------------------------------------------------------------
    def event(self, ev: Any) -> None:
        """Render one Event; a rendering bug never stops the run."""
        try:
            self._remember(ev)
            self._render(ev)
        except Exception as e:  # noqa: BLE001
            self.errors.append(f"{type(e).__name__}: {e}")

    def _remember(self, ev: Any) -> None:
        if ev.kind in ("thinking", "prompt", "unknown", "system", "result"):
            return
        text = _one_line(str(ev), EVENT_TEXT_MAX)
        sub = bool((ev.payload or {}).get("subagent"))
        state = (ev.payload or {}).get("state")
        line = f"[{self.label or '-'}]{' (subagent)' if sub else ''} {ev.kind}{f'/{state}' if state else ''}: {text}"
        self.recent.append(line)
        if self._events is not None:
            record = {"at": round(getattr(ev, "at", time.time()), 3), "step": self.label, "kind": ev.kind,
                      "text": text, "subagent": sub}
            if ev.tool:
                record["tool"] = ev.tool
            if state:
                record["state"] = state
            try:
                self._events.write(json.dumps(record, ensure_ascii=False) + "\n")
            except (OSError, ValueError):
                pass

    def _render(self, ev: Any) -> None:
        from .core.channel import ASK_TOOL, INBOX_TOOL

        k, p = ev.kind, ev.payload or {}
        sub = bool(p.get("subagent"))
        bar = "  | " if sub else ""
        if k == "step":
            self.label = ev.text
            if p.get("skipped"):
                self.say(f". {ev.text} —— 已经有了,跳过")
                return
            head = f"== {ev.text} ({int(p.get('index', 0)) + 1}/{p.get('total', '?')}) "
            self.say("\n" + head + "=" * max(4, self.width - _cols(head)))
            if p.get("resumed"):
                self.say("<- 接着上次的会话")
        elif k == "text":
            if sub and not self.verbose:
                return
            lines = clean(ev.text).strip("\n").splitlines() or [""]
            limit = 10_000 if self.verbose else 40
            for line in lines[:limit]:
                self.say(f"{bar}  {line}".rstrip())
            if len(lines) > limit:
                self.say(f"{bar}  …(还有 {len(lines) - limit} 行,-v 看全部)")
        elif k == "thinking":
            if sub and not self.verbose:
                return
            self.say(f"{bar}~ {_one_line(ev.text, self.width - 6)}")
        elif k == "tool_call":
            inp = p.get("input") if isinstance(p.get("input"), dict) else {}
            if p.get("id"):
                self._tools[p["id"]] = ev.tool
            if ev.tool == ASK_TOOL:
                return  # the ask event shows the question
            if ev.tool == INBOX_TOOL:
                self.say(f"{bar}* 查收件箱")
            elif ev.tool in ("Agent", "Task"):
                who = inp.get("subagent_type") or "subagent"
                self.say(f"{bar}> 派给 {who}:{_one_line(inp.get('description') or ev.text, self.width - 16)}")
            else:
                self.say(f"{bar}* {ev.tool} {_one_line(ev.text, self.width - len(ev.tool) - 8)}".rstrip())
        elif k == "tool_result":
            tool = self._tools.get(p.get("tool_use_id") or "", "")
            if p.get("is_error"):
                self.say(f"{bar}x {_one_line(ev.text, self.width - 6)}")
            elif tool in ("Agent", "Task") and not sub:
                self.say(f"<- 报告交回来了:{_one_line(_gist(_full_text(ev)), self.width - 12)}")
            elif self.verbose:
                self.say(f"{bar}  → {_one_line(ev.text, self.width - 8)}")
        elif k == "ask":
            self._ask(ev)
        elif k == "retry":
            why = _one_line(p.get("error") or "", 100)
            self.say(f"~ {ev.text}" + (f":{why}" if why else ""))
        elif k == "handoff":
            self._handoff(ev)
        elif k == "error":
            self.say(f"{bar}x {_one_line(ev.text, self.width - 6)}")
        elif k == "reset":
            pre, post = p.get("pre_tokens"), p.get("post_tokens")
            self.say(f"# 上下文被压缩了" + (f"({_k(pre)} → {_k(post)})" if pre and post else ""))
        elif k == "task":
            if ev.text:
                self.say(f"! {_one_line(ev.text, 400)}")
            elif self.verbose and p.get("description"):
                self.say(f"{bar}# {_one_line(p.get('description') or '', 80)} {p.get('status') or ''}".rstrip())
        elif k == "prompt":
            if self.verbose:
                self.say(f"{bar}  » {_one_line(ev.text, self.width - 8)}")
        elif k == "system":
            if self.verbose and ev.text == "init" and p.get("session_id"):
                self.say(f"{bar}- 会话 {p['session_id']}")
        elif k in ("result", "unknown"):
            return
        elif self.verbose:
            self.say(_one_line(str(ev), self.width))

    def _ask(self, ev: Any) -> None:
        p = ev.payload or {}
        if p.get("kind") == "mail":
            where = ("已追加进确认书" if self.brief_path is not None and self.brief_path.exists()
                     else "没有确认书可落盘 —— 它可能活不过下一个步骤")
            self.say(f"+ 收到 (它下次查收件箱时会看到;{where})")
            return
        state, qid = p.get("state"), str(p.get("id") or "")
        waited = qid in self._seen_asks
        if state == "asked" or not waited:
            self._seen_asks.add(qid)
            lines = clean(ev.text).strip().splitlines() or [""]
            self.say(f"  ? {lines[0]}")
            for line in lines[1:]:
                self.say(f"    {line}")
            for i, opt in enumerate(p.get("options") or [], 1):
                self.say(f"     {i}) {clean(opt)}")
            if state == "asked" and isinstance(p.get("remaining"), int) and p["remaining"] >= 0:
                self.say(f"     (还能问 {p['remaining']} 次)")
            if state == "asked":
                self.refresh()
                return
        if state == "answered":
            self.say(f"  + {_one_line(p.get('answer') or '(空回复)', self.width - 6)}")
        elif state == "timeout" and not waited:
            self.say("  ! 没人值守(--timeout 0)—— 它自己判断,把假设记进「未知与假设」")
        elif state == "timeout":
            self.say("  ! 无人应答 —— 它会自己判断,把假设记进「未知与假设」")
        elif state == "over_budget":
            self.say("  ! 提问额度用完 —— 它会自己判断")
        elif state == "declined":
            why = p.get("answer") or ""
            self.say("  . 已跳过" + (f"({why})" if why else "") + " —— 它会自己判断")
        elif state == "invalid":
            self.say("  x 问题是空的,让它写清楚再问")
        self.refresh()

    def _handoff(self, ev: Any) -> None:
        p = ev.payload or {}
        phase = p.get("phase")
        if phase == "near":
            self.say(f"# 上下文 {_k(int(p.get('used') or 0))},快到交接线 {_k(int(p.get('at') or 0))}")
        elif phase == "writing":
            self.say("# 上下文满了 —— 写交接书准备换代")
        elif phase == "done":
            if p.get("degraded"):
                self.say("x 交接没写成,用了降级版本 —— 接手的人会自己去现场看")
            if p.get("path"):
                self.say(f"<- 交接写在 {_home(p['path'])}")
            self.say("<- 新会话接手,上下文从头开始")
        else:
            self.say(f"# {_one_line(ev.text, self.width)}")

    # -- attempts (from the runtime) ---------------------------------------------------
    def attempt(self, label: str) -> None:
        self.label = label
        if "·判定#" in label:
            self.say(f"- {label}:独立判定这一轮(新会话,没参与干活)")
        elif "#round" in label:
            self.say(f"- {label}:没达成,接着同一个会话再干一轮")
        elif "#retry" in label:
            self.say(f"- {label}:重来一次")

    def attempt_done(self, r: Any, total: float) -> None:
        self.cost = total
        bits = [f"${r.cost_usd:.4f}", f"{r.num_turns} 轮", f"{r.duration_s:.1f}s"]
        if r.context:
            bits.append(f"上下文 {_k(r.context)}")
        if r.attempts > 1:
            bits.append(f"试了 {r.attempts} 次")
        if r.retired:
            bits.append(f"换代 {len(r.retired)} 次")
        bits.append(f"累计 ${total:.4f}")
        if r.ok:
            self.say(f"+ {r.step} · " + " · ".join(bits))
        else:
            self.say(f"x {r.step} 没成:{_one_line(r.error or '未知错误', 200)} · " + " · ".join(bits))


def _full_text(ev: Any) -> str:
    """A tool result's whole text (the event's own text is cut at 500 characters)."""
    content = getattr(ev.raw, "content", None)
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(str(b.get("text", "")) for b in content if isinstance(b, dict))
    return ev.text


def _gist(report: str) -> str:
    """A worker's report in one line: its conclusion, else its first line of prose."""
    lines = [ln.strip() for ln in clean(report).splitlines() if ln.strip()]
    for i, line in enumerate(lines):
        if re.match(r"^#+\s*结论", line) and i + 1 < len(lines):
            return lines[i + 1]
    return next((ln for ln in lines if not ln.startswith(("#", "<", "["))), lines[0] if lines else "")


def _isatty(stream: Any) -> bool:
    try:
        return bool(stream is not None and stream.isatty())
    except (ValueError, AttributeError, OSError):
        return False


# -- reading the person ------------------------------------------------------------------------
class Console:
    """Reads stdin for the whole run on a daemon thread, so nothing typed is eaten by the wrong question.

    A line goes to: the pending interrupt (after Ctrl-C), the oracle (``?`` first), the oldest waiting
    question (empty = skip it), or else the agent's inbox (and the brief). EOF closes the channel, so
    no question waits for a person who cannot come.

    At a terminal the keys are read one by one (the terminal's own line editing and signals are off
    for the run): the prompt stays on the last line with what you typed so far, and Ctrl-C arrives
    as a key. As a signal it would also reach the Claude Code CLI processes — they share flower's
    process group — and end them mid-turn; as a key it only interrupts at the next message boundary.
    """

    def __init__(self, screen: Screen, channel: Any, runtime: Any, loop: asyncio.AbstractEventLoop, *,
                 tty: bool, oracle: Callable[[str], Any] | None = None, stream: Any = None) -> None:
        self.screen, self.channel, self.runtime, self.loop = screen, channel, runtime, loop
        self.tty, self.oracle = tty, oracle
        self.stream = stream if stream is not None else sys.stdin
        self.interrupting = False
        self.quitting = False
        self.typed = ""
        self.main: asyncio.Task[Any] | None = None
        self.oracles: set[Any] = set()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._saved: Any = None
        self._esc = ""

    def start(self) -> None:
        if self.tty:
            self._keys_on()
            self.screen.prompt = self._prompt
            self.screen.refresh()
        self._thread = threading.Thread(target=self._read, name="flower-stdin", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self.screen.hide_prompt()
        self._keys_off()

    def _prompt(self) -> str | None:
        if self._stop.is_set():
            return None
        if self.interrupting:
            head = PROMPT_INTERRUPT
        elif self.channel is not None and self.channel.pending():
            head = PROMPT_ANSWER
        else:
            head = PROMPT_IDLE
        return head + self.typed

    # -- the terminal, key by key --------------------------------------------------------
    def _keys_on(self) -> None:
        try:
            import termios

            fd = self.stream.fileno()
            self._saved = termios.tcgetattr(fd)
            mode = termios.tcgetattr(fd)
            mode[3] &= ~(termios.ICANON | termios.ECHO | termios.ISIG | termios.IEXTEN)
            mode[6][termios.VMIN], mode[6][termios.VTIME] = 1, 0
            termios.tcsetattr(fd, termios.TCSANOW, mode)
            atexit.register(self._keys_off)
        except Exception:  # noqa: BLE001 - no raw keys here (not a real terminal): read lines instead
            self._saved = None

    def _keys_off(self) -> None:
        saved, self._saved = self._saved, None
        if saved is None:
            return
        try:
            import termios

            termios.tcsetattr(self.stream.fileno(), termios.TCSADRAIN, saved)
        except Exception:  # noqa: BLE001
            pass

    def _keys(self, text: str) -> bool:
        """Edit the line being typed; False at Ctrl-D on an empty line (end of input)."""
        for ch in text:
            if self._esc:  # an escape sequence (arrow keys and the like): swallowed whole
                self._esc += ch
                if (len(self._esc) == 2 and ch not in "[O") or (len(self._esc) > 2 and "@" <= ch <= "~"):
                    self._esc = ""
                continue
            if ch == "\x1b":
                self._esc = ch
            elif ch == "\x03":
                self.typed = ""
                self.loop.call_soon_threadsafe(self.ctrl_c)
            elif ch == "\x04":
                if not self.typed:
                    return False
            elif ch in "\r\n":
                line, head = self.typed, self._prompt() or ""
                self.typed = ""
                self.screen.say(head)  # what was typed stays on screen, above the fresh prompt
                self._line(line)
            elif ch in "\x7f\x08":
                self.typed = self.typed[:-1]
            elif ch == "\x15":  # Ctrl-U
                self.typed = ""
            elif ch == "\x17":  # Ctrl-W
                self.typed = self.typed.rstrip()
                self.typed = self.typed[: self.typed.rfind(" ") + 1]
            elif ch >= " ":
                self.typed += ch
        self.screen.refresh()
        return True

    # -- Ctrl-C ------------------------------------------------------------------------
    def ctrl_c(self) -> None:
        if self.interrupting:
            self.quitting = True
            self.screen.say("! 再按了一次 Ctrl-C:退出")
            if self.main is not None:
                self.main.cancel()
            return
        self.interrupting = True
        waiting = len(self.channel.pending()) if self.channel is not None else 0
        self.screen.say("! 要打断这一轮:说句话再回车,它会带着你的话接着干。正在跑的 subagent 会丢掉半成品。"
                        "(再按一次 Ctrl-C = 退出)")
        if waiting:
            self.screen.say(f"  (有 {waiting} 个提问还等着,打断不影响它们)")

    # -- the reading thread ------------------------------------------------------------
    def _read(self) -> None:
        try:
            fd = self.stream.fileno()
        except (AttributeError, ValueError, OSError):
            self._eof()
            return
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        buf = ""
        while not self._stop.is_set():
            try:
                ready, _, _ = select.select([fd], [], [], 0.2)
            except (ValueError, OSError):
                ready = [fd]  # no select on this stream: block
            if not ready:
                continue
            try:
                chunk = os.read(fd, 4096)
            except OSError:
                chunk = b""
            if not chunk:
                if buf.strip():
                    self._line(buf)
                self._eof()
                return
            if self._saved is not None:
                if not self._keys(decoder.decode(chunk)):
                    self._eof()
                    return
                continue
            buf += decoder.decode(chunk)
            while "\n" in buf:
                line, buf = buf.split("\n", 1)
                self._line(line)

    def _line(self, raw: str) -> None:
        try:
            self._route(raw.rstrip("\r"))
        except Exception as e:  # noqa: BLE001 - a routing bug must not kill the reader
            self.screen.say(f"x 没处理好这行输入:{type(e).__name__}: {e}")

    def _route(self, line: str) -> None:
        text = line.strip()
        if self.interrupting:
            self.interrupting = False
            self.loop.call_soon_threadsafe(self.runtime.interrupt, text)
            self.screen.say("! 已打断这一轮" + (f",带着你的话接着干:{_one_line(text, 80)}" if text else ",接着跑")
                            + "(在下一个消息边界生效)")
            return
        if text.startswith(("?", "？")):
            question = text[1:].strip()
            if question and self.oracle is not None:
                self.oracles.add(asyncio.run_coroutine_threadsafe(self.oracle(question), self.loop))
            return
        pending = self.channel.pending() if self.channel is not None else []
        if pending:
            if text:
                self.channel.answer(pending[0].id, text)
            else:
                self.channel.decline(pending[0].id)
            return
        if not text:
            return
        if self.channel is None:
            self.screen.say("! 这个流程没有提问通道,收不到你的话(? 开头可以问旁路)")
            return
        self.channel.send(text)

    def _eof(self) -> None:
        self._keys_off()  # Ctrl-C is a signal again
        if self.channel is not None and not self._stop.is_set():
            self.loop.call_soon_threadsafe(self.channel.close)
        self.screen.hide_prompt()

    async def drain(self, timeout: float = ORACLE_WAIT_S) -> None:
        """Wait (bounded) for oracle answers still on their way."""
        waiting = [f for f in self.oracles if not f.done()]
        if not waiting:
            return
        self.screen.say(f"(等 {len(waiting)} 条旁路问答收尾…)")
        await asyncio.wait([asyncio.wrap_future(f) for f in waiting], timeout=timeout)


# -- places --------------------------------------------------------------------------------------
def _workspace(args: argparse.Namespace, *, create: bool = True) -> Path:
    raw = Path(os.path.expanduser(str(args.workspace)))
    try:
        ws = raw.resolve()
    except (OSError, RuntimeError) as e:
        raise Exit(1, f"工作目录 {raw} 解析不了:{e}")
    if ws.exists() and not ws.is_dir():
        raise Exit(1, f"工作目录 {ws} 不是文件夹:-w 要指向一个目录")
    if not ws.exists():
        if not create:
            raise Exit(1, f"工作目录 {ws} 不存在")
        try:
            ws.mkdir(parents=True)
        except OSError as e:
            raise Exit(1, f"建不了工作目录 {ws}:{e.strerror or e};换个 -w,或者先把目录建好")
    try:
        with os.scandir(ws) as it:
            next(it, None)
    except OSError as e:
        raise Exit(1, f"工作目录 {ws} 读不了:{e.strerror or e};看看权限,或者换个 -w")
    if create and not os.access(ws, os.W_OK | os.X_OK):
        raise Exit(1, f"工作目录 {ws} 写不了:看看权限,或者换个 -w")
    return ws


def _run_dir(args: argparse.Namespace, ws: Path, *, create: bool = True) -> Path:
    raw = getattr(args, "run_dir", None)
    rd = (Path(os.path.expanduser(raw)).resolve() if raw else ws / "runs")
    if rd.exists() and not rd.is_dir():
        raise Exit(1, f"运行目录 {rd} 不是文件夹:-r 要指向一个目录")
    if create:
        try:
            rd.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise Exit(1, f"建不了运行目录 {rd}:{e.strerror or e};换个 -r")
        if not os.access(rd, os.W_OK | os.X_OK):
            raise Exit(1, f"运行目录 {rd} 写不了:看看权限,或者换个 -r")
    return rd


def _is_git(path: Path) -> bool:
    try:
        out = subprocess.run(["git", "-C", str(path), "rev-parse", "--is-inside-work-tree"],
                             capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return out.returncode == 0 and out.stdout.strip() == "true"


# -- credentials ---------------------------------------------------------------------------------
def _mask(value: str) -> str:
    return value[:4] + "…" if len(value) > 4 else "…"


def _credentials(args: argparse.Namespace, screen: Screen | None = None) -> None:
    """Gate one: credentials must be found. On a terminal, offer to write them; else one line, exit 1."""
    from .core.credentials import SETTINGS_KEYS, check_credentials, load_dotenv

    taken = load_dotenv()
    try:
        check_credentials()
    except RuntimeError as e:
        if getattr(args, "verbose", False):
            print(f"flower: {e}", file=sys.stderr)
        if not (_isatty(sys.stdin) and _isatty(sys.stdout)) or not _setup("还没配过凭证。"):
            raise Exit(1, NO_CREDS)
        taken = load_dotenv()
        try:
            check_credentials()
        except RuntimeError:
            raise Exit(1, NO_CREDS) from None
    if getattr(args, "verbose", False) and screen is not None:
        for key in SETTINGS_KEYS:
            value = os.environ.get(key)
            if value:
                shown = _mask(value) if "KEY" in key or "TOKEN" in key else value
                where = taken.get(key, "进程环境")
                screen.say(f"- {key}={shown}({where})")


def _env_file() -> Path:
    return Path.home() / ".config" / "flower" / ".env"


def write_env(values: dict[str, str], path: Path | None = None) -> Path:
    """Write the credentials file (whole file, 0600), empty values skipped; returns its path."""
    path = path or _env_file()
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = ["# 由 `flower setup` 写。里面有凭证:别提交进版本库。"]
    lines += [f"{k}={json.dumps(v, ensure_ascii=False)}" for k, v in values.items() if v]
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    os.chmod(path, 0o600)
    return path


def setup_values(token: str, base_url: str = "", model: str = "") -> dict[str, str]:
    """The keys `flower setup` writes for what the person typed."""
    token, base_url, model = token.strip(), base_url.strip(), model.strip()
    values = {"ANTHROPIC_API_KEY" if token.startswith("sk-ant-") else "ANTHROPIC_AUTH_TOKEN": token}
    if base_url:
        values["ANTHROPIC_BASE_URL"] = base_url
    if model:
        for key in ("ANTHROPIC_MODEL", "ANTHROPIC_DEFAULT_OPUS_MODEL", "ANTHROPIC_DEFAULT_SONNET_MODEL"):
            values[key] = model
    return values


def _setup(reason: str) -> bool:
    """The interactive configuration; True when a file was written (and loaded)."""
    path = _env_file()
    print("== 配置 flower " + "=" * 40)
    print(reason)
    print(f"凭证会存到 {_home(path)}(只你可读)。装一次,处处生效。\n")
    try:
        token = input("1. 你的 API key 或网关 token (Anthropic 官方的 sk-ant-… 或第三方网关签发的)\n   > ")
        if not token.strip():
            print("没给 token,取消。", file=sys.stderr)
            return False
        base = input("\n2. 网关地址 (直接回车 = Anthropic 官方;第三方网关填它的 BASE_URL)\n   > ")
        model = input("\n3. 模型名 (直接回车 = 默认;网关有自己的模型名就填)\n   > ")
    except (EOFError, KeyboardInterrupt):
        print("\n已取消", file=sys.stderr)
        return False
    values = setup_values(token, base, model)
    write_env(values, path)
    for key, value in values.items():
        os.environ[key] = value
    print(f"\n+ 存好了:{_home(path)}")
    return True


# -- the runtime, shown ----------------------------------------------------------------------------
def _runtime(screen: Screen, **kw: Any) -> Any:
    """A Runtime whose every ``run`` (steps, rounds, verdicts) is announced and summed up on the screen."""
    from .core.runtime import Runtime

    class ShownRuntime(Runtime):
        async def run(self, spec: Any, prompt: str, *, step_name: str | None = None, **more: Any) -> Any:
            screen.attempt(step_name or spec.name)
            r = await super().run(spec, prompt, step_name=step_name, **more)
            screen.attempt_done(r, self.total_cost())
            return r

    try:
        return ShownRuntime(**kw)
    except RuntimeError as e:
        if "credential" in str(e).lower():
            raise Exit(1, NO_CREDS) from None
        raise


def _install_signals(loop: asyncio.AbstractEventLoop, runtime: Any, screen: Screen, console: Console | None) -> None:
    """SIGTERM/SIGHUP: the step in flight goes into the manifest, then the default action (the process ends)."""

    def die(sig: signal.Signals) -> None:
        try:
            runtime.rescue()
        finally:
            if console is not None:
                console.stop()
            screen.say(f"! 收到 {sig.name}:在途的步骤已记进 {runtime.manifest_path}", err=True)
            screen.close()
            try:
                loop.remove_signal_handler(sig)
            except (RuntimeError, ValueError):
                pass
            signal.signal(sig, signal.SIG_DFL)
            os.kill(os.getpid(), sig)

    for name in ("SIGTERM", "SIGHUP"):
        sig = getattr(signal, name, None)
        if sig is None:
            continue
        try:
            loop.add_signal_handler(sig, die, sig)
        except (NotImplementedError, RuntimeError, ValueError):
            pass  # not the main thread, or no signals here
    if console is not None and console.tty:
        try:
            loop.add_signal_handler(signal.SIGINT, console.ctrl_c)
        except (NotImplementedError, RuntimeError, ValueError):
            pass


async def _drive(wf: Any, runtime: Any, screen: Screen, args: argparse.Namespace, *, listen: bool,
                 oracle_ctx: dict[str, Any]) -> Any:
    """Run a workflow with the screen, the stdin console, the oracle and the signal handlers around it."""
    loop = asyncio.get_running_loop()
    channel = getattr(wf, "channel", None)
    if channel is not None and hasattr(channel, "on_event"):
        previous = channel.on_event

        def both(ev: Any) -> None:
            screen.event(ev)
            if previous is not None:
                previous(ev)

        channel.on_event = both
    console = None
    if listen:
        async def ask_aside(question: str) -> None:
            await _aside(question, screen, live=True, **oracle_ctx)

        console = Console(screen, channel, runtime, loop, tty=_isatty(sys.stdin) and screen.tty, oracle=ask_aside)
        console.main = asyncio.current_task()
        console.start()
    _install_signals(loop, runtime, screen, console)
    try:
        return await wf.run(runtime, on_event=screen.event)
    except asyncio.CancelledError:
        if console is not None and console.quitting:
            raise Exit(130, "已退出(在途的步骤已记进清单)") from None
        raise
    finally:
        if console is not None:
            console.stop()
            await console.drain()


# -- the oracle ------------------------------------------------------------------------------------
def read_state(ws: Path, rd: Path, *, isolate: bool = False) -> dict[str, Any]:
    """``wake_state()`` plus what a person wants to see, all read-only: the documents, the last run, handoffs."""
    from .core import manifest
    from .docs import Brief, Goal
    from .workflow import starter_paths, wake_state

    state = dict(wake_state(ws, run_dir=rd, isolate=isolate))
    paths = starter_paths(ws, run_dir=rd, isolate=isolate)
    rows = manifest.read_rows(paths.manifest) if paths.manifest.is_file() else []
    last = rows[-1].get("run") if rows else None
    state.update(workspace=paths.workspace, run_dir=paths.run_dir, workbench=paths.workbench, log=paths.log,
                 brief_doc=Brief.load(paths.brief), goal_doc=Goal.load(paths.goal), last_run=last,
                 last_results=[r for r in rows if r.get("run") == last],
                 handoffs=sorted(paths.notes.glob("交接-*.md")) if paths.notes.is_dir() else [])
    return state


def _snapshot(state: dict[str, Any]) -> list[str]:
    """What the oracle (and `flower status`) says about a folder's state."""
    lines = []
    brief, goal = state.get("brief_doc"), state.get("goal_doc")
    if state.get("waking"):
        lines.append(f"需求已确认({_home(state['brief'])})")
        if brief is not None and getattr(brief, "goal", ""):
            lines.append("  目标:" + _one_line(brief.goal, 200))
    else:
        lines.append("需求还没确认" + ("(确认书不完整)" if brief is not None else ""))
    if state.get("checks"):
        unver = len(getattr(goal, "unverifiable", None) or [])
        lines.append(f"目标 {state['checks']} 条检查" + (f"(其中 {unver} 条此环境无法验证)" if unver else "")
                     + f"({_home(state['goal'])})")
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
            err = f" —— {_one_line(r.get('error'), 100)}" if r.get("error") else ""
            lines.append(f"  {mark} {r.get('step')} ${float(r.get('cost_usd') or 0):.4f}{err}")
    for h in state.get("handoffs") or []:
        lines.append(f"交接书 {_home(h)}")
    return lines


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
            e = json.loads(line)
        except ValueError:
            continue
        state = f"/{e['state']}" if e.get("state") else ""
        sub = " (subagent)" if e.get("subagent") else ""
        out.append(f"[{e.get('step') or '-'}]{sub} {e.get('kind')}{state}: {e.get('text', '')}")
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


async def _aside(question: str, screen: Screen, *, workspace: Path, run_dir: Path, isolate: bool,
                 live: bool) -> float:
    """Ask the oracle: a separate Runtime under <run_dir>/aside, a fresh session, never the run's context."""
    from .core.roles import oracle
    from .core.workbench import Workbench
    from .workflow import starter_paths

    try:
        paths = starter_paths(workspace, run_dir=run_dir, isolate=isolate)
        try:
            state = read_state(workspace, run_dir, isolate=isolate)
        except (RuntimeError, OSError) as e:
            state = {}
            screen.say(f"! 读不了运行状态:{_one_line(e, 120)}")
        events = list(screen.recent) if live else _tail_events(run_dir)
        prompt = ORACLE_PROMPT.format(
            question=question, snapshot="\n".join(f"- {x}" for x in _snapshot(state)) or "- (什么都没有)",
            window=ORACLE_WINDOW, cut=EVENT_TEXT_MAX, events="\n".join(events) or "(没有事件记录)",
            workspace=paths.workspace, workbench=paths.workbench, brief=paths.brief, goal=paths.goal, log=paths.log)
        wb = Workbench(paths.workspace, home=paths.workbench) if paths.workbench.is_dir() else False
        from .core.runtime import Runtime

        rt = Runtime(workspace=paths.workspace, run_dir=run_dir / "aside", workbench=wb, handoff=False)
        try:
            r = await rt.run(oracle(), prompt, step_name="旁路问答")
        finally:
            rt.close()
    except Exit:
        raise
    except Exception as e:  # noqa: BLE001 - the oracle never disturbs the run
        screen.say(f"x 旁路问答失败:{type(e).__name__}: {_one_line(e, 200)}")
        return 0.0
    if not r.ok:
        screen.say(f"x 旁路问答失败:{_one_line(r.error or '没有回答', 200)}")
        return r.cost_usd
    screen.say("# 旁路")
    for line in clean(r.text).strip().splitlines() or ["(空)"]:
        screen.say(f"  {line}".rstrip())
    tail = "没有打扰正在跑的运行" if live else "没有进入那次运行的上下文"
    screen.say(f"  (${r.cost_usd:.4f},{tail})")
    return r.cost_usd


# -- subcommands -----------------------------------------------------------------------------------
def _read_ask(state: dict[str, Any], new: bool) -> tuple[str, bool]:
    """No ask on the command line: ask at the terminal, or read it from a pipe."""
    if not _isatty(sys.stdin):
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
    from .workflow.starter import WORK_STEP

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
            bits.append(f"干活上下文 {_k(used)}")
    bits.append(f"第 {max(1, int(state.get('woke') or 0))} 次唤醒")
    return f"<- 在 {_home(ws)} 接上上次  " + " · ".join(bits)


def _handoff_policy(args: argparse.Namespace) -> Any:
    if args.no_handoff:
        return False
    if args.window:
        from .core.agent import HandoffPolicy

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


def _finish(ctx: dict[str, Any], runtime: Any, screen: Screen) -> int:
    screen.say(f"\n总花费 ${runtime.total_cost():.4f} · 清单 {runtime.manifest_path}")
    stopped = ctx.get("_failed_at") or ctx.get("_stopped")
    if not stopped:
        return 0
    r = (ctx.get("_results") or {}).get(stopped)
    why = ctx.get("_aborted") or (r.error if r is not None and r.error else "") or "没通过检查"
    if re.search(r"\b401\b|invalid.{0,8}(api.?key|token)|authentication|unauthori[sz]ed", str(why), re.I):
        why += "(看起来是凭证不对:跑 `flower setup` 重配,或者检查 ANTHROPIC_API_KEY / ANTHROPIC_BASE_URL)"
    raise Exit(1, f"在步骤 '{stopped}' 中止:{_one_line(why, 300)}")


def cmd_go(args: argparse.Namespace) -> int:
    from .workflow import starter_flow, starter_paths

    ws = _workspace(args)
    rd = _run_dir(args, ws, create=False)
    if args.isolate and not _is_git(ws):
        raise Exit(1, f"--isolate 要求 {ws} 是 git 仓库(每个 subagent 要分一份 worktree)。先 git init,或者去掉 --isolate。")
    paths = starter_paths(ws, run_dir=rd, isolate=args.isolate)
    screen = Screen(verbose=args.verbose, brief_path=paths.brief)
    _credentials(args, screen)
    try:
        state = read_state(ws, rd, isolate=args.isolate)
    except (RuntimeError, OSError) as e:
        raise Exit(1, f"读不了上次的运行状态:{_one_line(e, 300)}")
    ask, new = " ".join(args.ask).strip(), args.new
    if ask.startswith(("?", "？")):
        return _ask_once(ask[1:].strip(), args, ws, rd)
    if not args.ask:
        ask, new = _read_ask(state, new)
    kw = starter_kwargs(args)
    stdin_tty = _isatty(sys.stdin)
    if not stdin_tty and kw["timeout_s"] != 0:
        screen.say("! 标准输入不是终端,没人能回答提问:输入一结束,提问就让它自己判断。无人值守就加 --timeout 0")
    rd = _run_dir(args, ws)
    try:
        wf = starter_flow(ask, workspace=ws, run_dir=rd, new=new, **kw)
    except ValueError as e:
        raise Exit(1, str(e)) from None
    screen = Screen(verbose=args.verbose, brief_path=paths.brief, events_path=rd / EVENTS_FILE)
    runtime = _runtime(screen, workspace=ws, run_dir=rd, trim=not args.no_trim, handoff=_handoff_policy(args))
    try:
        if state.get("waking") and not new:
            screen.say(_banner(ws, state, runtime))
        listen = stdin_tty or kw["timeout_s"] != 0
        oracle_ctx = {"workspace": ws, "run_dir": rd, "isolate": args.isolate}
        ctx = asyncio.run(_drive(wf, runtime, screen, args, listen=listen, oracle_ctx=oracle_ctx))
        code = _finish(ctx, runtime, screen)
        if code == 0:
            done = "需求已确认" if args.clarify_only else "完成"
            screen.say(f"+ {done} · 需求 {_home(paths.brief)}" + ("" if args.no_goal or args.clarify_only
                                                              else f" · 目标 {_home(paths.goal)}"))
        return code
    finally:
        runtime.close()
        screen.close()


def load_target(target: str) -> Any:
    """``module:attr`` or ``file.py:attr`` → the Workflow (a callable is called once)."""
    from .workflow import Workflow

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
        raise Exit(1, f"导入 '{name}' 失败:{type(e).__name__}: {_one_line(e, 300)}") from None
    if not hasattr(module, attr):
        raise Exit(1, f"'{name}' 里没有 '{attr}'")
    obj = getattr(module, attr)
    if callable(obj) and not isinstance(obj, Workflow):
        try:
            obj = obj()
        except Exit:
            raise
        except Exception as e:  # noqa: BLE001
            raise Exit(1, f"调用 '{target}' 出错:{type(e).__name__}: {_one_line(e, 300)}") from None
    if not isinstance(obj, Workflow):
        raise Exit(1, f"'{target}' 给出的不是 Workflow,而是 {type(obj).__name__}")
    return obj


def cmd_run(args: argparse.Namespace) -> int:
    ws = _workspace(args)
    rd = _run_dir(args, ws)
    wf = load_target(args.target)
    screen = Screen(verbose=args.verbose, events_path=rd / EVENTS_FILE)
    _credentials(args, screen)
    runtime = _runtime(screen, workspace=ws, run_dir=rd, trim=args.trim,
                       workbench=bool(args.workbench) and getattr(wf, "workbench", None) is None)
    try:
        listen = _isatty(sys.stdin) or getattr(wf, "channel", None) is not None
        oracle_ctx = {"workspace": ws, "run_dir": rd, "isolate": False}
        ctx = asyncio.run(_drive(wf, runtime, screen, args, listen=listen, oracle_ctx=oracle_ctx))
        return _finish(ctx, runtime, screen)
    finally:
        runtime.close()
        screen.close()


def cmd_once(args: argparse.Namespace) -> int:
    from .core.agent import AgentSpec

    ws = _workspace(args)
    rd = _run_dir(args, ws)
    if args.fork and not args.resume:
        raise Exit(2, "--fork 要和 --resume SESSION_ID 一起用")
    screen = Screen(verbose=args.verbose, events_path=rd / EVENTS_FILE)
    _credentials(args, screen)
    tools = [t.strip() for t in args.tools.split(",") if t.strip()]
    spec = AgentSpec("ad-hoc", args.instructions, allowed_tools=tools, permission_mode=args.permission_mode,
                     max_budget_usd=args.budget)
    runtime = _runtime(screen, workspace=ws, run_dir=rd, trim=args.trim, workbench=bool(args.workbench))

    async def go() -> Any:
        _install_signals(asyncio.get_running_loop(), runtime, screen, None)
        return await runtime.run(spec, " ".join(args.prompt), step_name="ad-hoc", resume=args.resume,
                                 fork=args.fork, on_event=screen.event)

    try:
        r = asyncio.run(go())
        screen.say(f"\n总花费 ${runtime.total_cost():.4f} · 会话 {r.session_id} · 清单 {runtime.manifest_path}")
        if not r.ok:
            raise Exit(1, f"没成:{_one_line(r.error or '未知错误', 300)}")
        return 0
    finally:
        runtime.close()
        screen.close()


def cmd_status(args: argparse.Namespace) -> int:
    """Read-only: not a byte is written, not even the run dir is created."""
    ws = _workspace(args, create=False)
    rd = _run_dir(args, ws, create=False)
    try:
        state = read_state(ws, rd, isolate=args.isolate)
    except (RuntimeError, OSError) as e:
        raise Exit(1, f"读不了运行状态:{_one_line(e, 300)}")
    if args.json:
        print(json.dumps(_jsonable(state), ensure_ascii=False, indent=2))
        return 0
    print(f"flower status · {_home(ws)} · 运行目录 {_home(rd)}")
    nxt = (f"接着上次(第 {max(1, int(state.get('woke') or 0))} 次唤醒)" if state.get("waking")
           else "从头开始(先问清需求)")
    print(f"- 在这里跑 flower 会:{nxt}")
    for line in _snapshot(state):
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


def _ask_once(question: str, args: argparse.Namespace, ws: Path, rd: Path) -> int:
    if not question:
        raise Exit(2, "要问点什么,例如 flower ask \"到哪一步了?\"")
    if not rd.is_dir():
        raise Exit(1, f"{_home(ws)} 这里还没跑过 flower(没有 {_home(rd)}):没什么可问的")
    screen = Screen(verbose=args.verbose)
    _credentials(args, screen)
    asyncio.run(_aside(question, screen, workspace=ws, run_dir=rd, isolate=getattr(args, "isolate", False),
                       live=False))
    return 0


def cmd_ask(args: argparse.Namespace) -> int:
    ws = _workspace(args, create=False)
    rd = _run_dir(args, ws, create=False)
    return _ask_once(" ".join(args.question).strip(), args, ws, rd)


def cmd_setup(args: argparse.Namespace) -> int:
    if not (_isatty(sys.stdin) and _isatty(sys.stdout)):
        raise Exit(1, f"flower setup 要在终端里跑;不在终端就手写 {_home(_env_file())}(ANTHROPIC_API_KEY=…)")
    from .core.credentials import load_dotenv

    configured = _env_file().is_file() or bool(load_dotenv()) or any(
        os.environ.get(k) for k in ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN"))
    return 0 if _setup("重新配置。" if configured else "还没配过凭证。") else 1


def cmd_check(args: argparse.Namespace) -> int:
    from .core.credentials import check_credentials, load_dotenv

    load_dotenv()
    try:
        key = check_credentials()
    except RuntimeError as e:
        print(f"flower: {e}", file=sys.stderr)
        return 2
    print(f"flower: credentials found ({key})")
    return 0


async def _demo() -> int:
    """One real-CLI session, offline: the scripted model asks for a Write, the file appears."""
    import tempfile

    from .core.agent import AgentSpec, build_options
    from .testing import Rule, ScriptedModel, say, tool

    with tempfile.TemporaryDirectory(prefix="flower-demo-") as tmp:
        target = Path(tmp) / "hello.txt"
        rules = [Rule(tool("Write", {"file_path": str(target), "content": "hello from flower\n"}), prompt="hello"),
                 Rule(say(f"I wrote {target.name}."), result=target.name)]
        spec = AgentSpec("demo", "", allowed_tools=["Write"], permission_mode="acceptEdits")
        with ScriptedModel(rules) as model:
            print(f"flower demo: scripted model on {model.url}, workspace {tmp}")
            for msg in await model.collect("hello: write hello.txt", build_options(spec, cwd=tmp)):
                kind = type(msg).__name__
                if kind == "AssistantMessage":
                    for block in msg.content:
                        print(f"  model: {getattr(block, 'text', None) or f'{block.name} {block.input}'}")
                elif kind == "ResultMessage":
                    print(f"  result: {msg.subtype}, {msg.num_turns} turns, session {msg.session_id}")
        ok = target.is_file()
        print(f"flower demo: {target.name} {'written: ' + target.read_text().strip() if ok else 'MISSING'}")
        return 0 if ok else 1


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


COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {
    "go": cmd_go, "run": cmd_run, "once": cmd_once, "status": cmd_status, "ask": cmd_ask,
    "setup": cmd_setup, "check": cmd_check, "demo": lambda args: asyncio.run(_demo()),
}


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    p = parser()
    args = parse(argv, p)
    try:
        return COMMANDS[args.command or "go"](args)
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
        print(f"flower: 出错了:{type(e).__name__}: {_one_line(e, 400)}(加 -v 看完整的 traceback)", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
