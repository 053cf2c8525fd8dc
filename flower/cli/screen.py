"""The screen: every line flower prints, events rendered for a person, the prompt kept on the last line."""

from __future__ import annotations

import collections
import contextlib
import json
import re
import shutil
import sys
import threading
import time
import unicodedata
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator, TextIO

from .terminal import clean, isatty, one_line, tilde, tokens_k

if TYPE_CHECKING:
    from ..core.events import Event

ORACLE_WINDOW = 60
"""Recent events the screen keeps for the oracle (it reads the events file's tail when not live)."""
EVENT_TEXT_MAX = 200
EVENTS_FILE = "events.jsonl"


def event_line(record: dict[str, Any]) -> str:
    """One event as the oracle reads it, the same whether it comes from the screen or the events file."""
    state = f"/{record['state']}" if record.get("state") else ""
    sub = " (subagent)" if record.get("subagent") else ""
    return f"[{record.get('step') or '-'}]{sub} {record.get('kind')}{state}: {record.get('text', '')}"


def _cols(text: str) -> int:
    return sum(2 if unicodedata.east_asian_width(c) in "WF" else 1 for c in text)


class Screen:
    """Every line flower prints goes through ``say``: one lock, and a prompt kept on the last line."""

    def __init__(self, *, verbose: bool = False, out: TextIO | None = None, events_path: Path | None = None,
                 brief_path: Path | None = None) -> None:
        self.verbose = verbose
        self.out = out or sys.stdout
        self.tty = isatty(self.out)
        self.width = max(40, min(shutil.get_terminal_size((100, 24)).columns, 110))
        self.brief_path = brief_path
        self.prompt: Callable[[], str | None] = lambda: None
        self.recent: collections.deque[str] = collections.deque(maxlen=ORACLE_WINDOW)
        self.label = ""  # the attempt running now (step, step#round2, step·判定#1 …)
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
        with self._drawing():
            self._erase()
            stream = sys.stderr if err else self.out
            stream.write(text + "\n")
            stream.flush()
            self._draw_prompt()

    def refresh(self) -> None:
        """Redraw the prompt (its text changed: a question arrived or was settled, a key was typed)."""
        with self._drawing():
            self._erase()
            self._draw_prompt()

    def hide_prompt(self) -> None:
        with self._drawing():
            self.prompt = lambda: None
            self._erase()

    @contextlib.contextmanager
    def _drawing(self) -> Iterator[None]:
        """One writer at a time; a closed or broken terminal (a pipe gone away) never stops the run."""
        with self._lock:
            try:
                yield
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
        p = ev.payload or {}
        record = {"at": round(getattr(ev, "at", time.time()), 3), "step": self.label, "kind": ev.kind,
                  "text": one_line(str(ev), EVENT_TEXT_MAX), "subagent": bool(p.get("subagent"))}
        if ev.tool:
            record["tool"] = ev.tool
        if p.get("state"):
            record["state"] = p["state"]
        self.recent.append(event_line(record))
        if self._events is not None:
            try:
                self._events.write(json.dumps(record, ensure_ascii=False) + "\n")
            except (OSError, ValueError):
                pass

    def _render(self, ev: Any) -> None:
        from ..core.channel import ASK_TOOL, INBOX_TOOL

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
            self.say(f"{bar}~ {one_line(ev.text, self.width - 6)}")
        elif k == "tool_call":
            raw_input = p.get("input")
            inp: dict[str, Any] = raw_input if isinstance(raw_input, dict) else {}
            if p.get("id"):
                self._tools[p["id"]] = ev.tool
            if ev.tool == ASK_TOOL:
                return  # the ask event shows the question
            if ev.tool == INBOX_TOOL:
                self.say(f"{bar}* 查收件箱")
            elif ev.tool in ("Agent", "Task"):
                who = inp.get("subagent_type") or "subagent"
                self.say(f"{bar}> 派给 {who}:{one_line(inp.get('description') or ev.text, self.width - 16)}")
            else:
                self.say(f"{bar}* {ev.tool} {one_line(ev.text, self.width - len(ev.tool) - 8)}".rstrip())
        elif k == "tool_result":
            tool = self._tools.get(p.get("tool_use_id") or "", "")
            if p.get("is_error"):
                self.say(f"{bar}x {one_line(ev.text, self.width - 6)}")
            elif tool in ("Agent", "Task") and not sub:
                self.say(f"<- 报告交回来了:{one_line(_gist(_full_text(ev)), self.width - 12)}")
            elif self.verbose:
                self.say(f"{bar}  → {one_line(ev.text, self.width - 8)}")
        elif k == "ask":
            self._ask(ev)
        elif k == "retry":
            why = one_line(p.get("error") or "", 100)
            self.say(f"~ {ev.text}" + (f":{why}" if why else ""))
        elif k == "handoff":
            self._handoff(ev)
        elif k == "error":
            self.say(f"{bar}x {one_line(ev.text, self.width - 6)}")
        elif k == "reset":
            pre, post = p.get("pre_tokens"), p.get("post_tokens")
            self.say("# 上下文被压缩了" + (f"({tokens_k(pre)} → {tokens_k(post)})" if pre and post else ""))
        elif k == "task":
            if ev.text:
                self.say(f"! {one_line(ev.text, 400)}")
            elif self.verbose and p.get("description"):
                self.say(f"{bar}# {one_line(p.get('description') or '', 80)} {p.get('status') or ''}".rstrip())
        elif k == "prompt":
            if self.verbose:
                self.say(f"{bar}  » {one_line(ev.text, self.width - 8)}")
        elif k == "system":
            if self.verbose and ev.text == "init" and p.get("session_id"):
                self.say(f"{bar}- 会话 {p['session_id']}")
        elif k in ("result", "unknown"):
            return
        elif self.verbose:
            self.say(one_line(str(ev), self.width))

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
            self.say(f"  + {one_line(p.get('answer') or '(空回复)', self.width - 6)}")
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
            self.say(f"# 上下文 {tokens_k(int(p.get('used') or 0))},快到交接线 {tokens_k(int(p.get('at') or 0))}")
        elif phase == "writing":
            self.say("# 上下文满了 —— 写交接书准备换代")
        elif phase == "done":
            if p.get("degraded"):
                self.say("x 交接没写成,用了降级版本 —— 接手的人会自己去现场看")
            if p.get("path"):
                self.say(f"<- 交接写在 {tilde(p['path'])}")
            self.say("<- 新会话接手,上下文从头开始")
        else:
            self.say(f"# {one_line(ev.text, self.width)}")

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
        bits = [f"${r.cost_usd:.4f}", f"{r.num_turns} 轮", f"{r.duration_s:.1f}s"]
        if r.context:
            bits.append(f"上下文 {tokens_k(r.context)}")
        if r.attempts > 1:
            bits.append(f"试了 {r.attempts} 次")
        if r.retired:
            bits.append(f"换代 {len(r.retired)} 次")
        bits.append(f"累计 ${total:.4f}")
        if r.ok:
            self.say(f"+ {r.step} · " + " · ".join(bits))
        else:
            self.say(f"x {r.step} 没成:{one_line(r.error or '未知错误', 200)} · " + " · ".join(bits))


def _full_text(ev: Event) -> str:
    """A tool result's whole text (the event's own text is cut at 500 characters)."""
    content: object = getattr(ev.raw, "content", None)
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
