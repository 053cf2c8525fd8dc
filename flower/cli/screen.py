"""The screen: every line flower prints, events rendered for a person, the prompt kept on the last line."""

from __future__ import annotations

import collections
import contextlib
import json
import re
import shutil
import threading
import time
import unicodedata
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator, TextIO

from ..docs._sections import HEADINGS, heading
from .messages import doc, language, name, t
from .terminal import ERR, Terminal, clean, one_line, tilde, tokens_k

if TYPE_CHECKING:
    from ..core.events import Event

ORACLE_WINDOW = 60
"""Recent events the screen keeps for the oracle (it reads the events file's tail when not live)."""
EVENT_TEXT_MAX = 200
EVENTS_FILE = "events.jsonl"
SPINNER = "⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏"
SPIN_AFTER_S = 1.0
"""A model call quiet for this long gets the spinner line (on a terminal only)."""


def event_line(record: dict[str, Any]) -> str:
    """One event as the oracle reads it, the same whether it comes from the screen or the events file."""
    state = f"/{record['state']}" if record.get("state") else ""
    sub = " (subagent)" if record.get("subagent") else ""
    return f"[{record.get('step') or '-'}]{sub} {record.get('kind')}{state}: {record.get('text', '')}"


def _cols(text: str) -> int:
    return sum(2 if unicodedata.east_asian_width(c) in "WF" else 1 for c in text)


class Screen:
    """Every line flower prints goes through ``say``: one lock, a prompt kept on the last line, and a ``Terminal``
    that cleans whatever is written (a run's text, a tool name, the prompt's typed line)."""

    def __init__(self, *, verbose: bool = False, out: TextIO | None = None, events_path: Path | None = None,
                 brief_path: Path | None = None) -> None:
        self.verbose = verbose
        self.out = Terminal(out)
        self.tty = self.out.isatty()
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
        self._open_asks: set[str] = set()  # questions waiting on the person: the run is not thinking meanwhile
        self._denials: dict[str, str] = {}  # a guard's words to the model → what the person was shown instead
        self._tools: dict[str, str] = {}
        self._events = None
        self._busy = False  # an attempt is running: its model calls get the spinner
        self._quiet_since = time.monotonic()
        self._context = 0
        self._ticker: threading.Thread | None = None
        self._closed = threading.Event()
        self.gone = False
        """stdout's reader has gone (a pipe closed): the run goes on, and a command that only prints may stop."""
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
            (ERR if err else self.out).line(text, flush=True)
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
            except BrokenPipeError:
                self.gone = True
            except (ValueError, OSError):
                pass

    def _erase(self) -> None:
        if self._prompt_shown:
            self.out.erase(self._prompt_rows)
            self.out.flush()
            self._prompt_shown = False

    def _draw_prompt(self) -> None:
        if not self.tty:
            return
        parts = [clean(p) for p in (self._spinner(), self.prompt()) if p]  # cleaned first: the rows are counted
        if parts:
            columns = shutil.get_terminal_size((100, 24)).columns or 100
            # rows below the first: one per extra line, plus the ones a long line wraps onto
            self._prompt_rows = len(parts) - 1 + sum(max(0, (_cols(p) - 1) // columns) for p in parts)
            self.out.write("\n".join(parts))
            self.out.flush()
            self._prompt_shown = True

    # -- signs of life: the spinner during a model call --------------------------------
    def _spinner(self) -> str | None:
        quiet = time.monotonic() - self._quiet_since
        if not self._busy or self._open_asks or quiet < SPIN_AFTER_S:
            return None  # waiting for the person is not the model's time: the prompt says whose turn it is
        frame = SPINNER[int(quiet * 8) % len(SPINNER)]
        what = name(self.label) or t("screen.waiting_model")
        if self._context:
            return f"{frame} " + t("screen.thinking_context", label=what, elapsed=quiet, k=tokens_k(self._context))
        return f"{frame} " + t("screen.thinking", label=what, elapsed=quiet)

    def _tick(self) -> None:
        while not self._closed.wait(0.125):
            if self._busy and time.monotonic() - self._quiet_since >= SPIN_AFTER_S:
                self.refresh()

    def _alive(self) -> None:
        """Something happened: the spinner restarts its clock (and the ticker runs, on a terminal)."""
        self._quiet_since = time.monotonic()
        if self.tty and self._ticker is None:
            self._ticker = threading.Thread(target=self._tick, name="flower-spinner", daemon=True)
            self._ticker.start()

    def close(self) -> None:
        self._busy = False
        self._closed.set()
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
            self._alive()
            context = (ev.payload or {}).get("context")
            if isinstance(context, int) and context > 0 and not (ev.payload or {}).get("subagent"):
                self._context = context
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
                self.say(t("screen.skipped", step=name(ev.text)))
                return
            head = t("screen.step_head", step=name(ev.text), i=int(p.get("index", 0)) + 1, n=p.get("total", "?"))
            self.say("\n" + head + "=" * max(4, self.width - _cols(head)))
            if p.get("resumed"):
                self.say(t("screen.resumed"))
        elif k == "text":
            if sub and not self.verbose:
                return
            lines = [_glossed(line) for line in clean(ev.text).strip("\n").splitlines()] or [""]
            limit = 10_000 if self.verbose else 40
            for line in lines[:limit]:
                self.say(f"{bar}  {line}".rstrip())
            if len(lines) > limit:
                self.say(f"{bar}  " + t("screen.more_lines", n=len(lines) - limit))
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
                self.say(bar + t("screen.inbox"))
            elif ev.tool in ("Agent", "Task"):
                who = inp.get("subagent_type") or "subagent"
                self.say(bar + t("screen.dispatch", who=who, what=one_line(inp.get("description") or ev.text, self.width - 16)))
            else:
                self.say(f"{bar}* {ev.tool} {one_line(ev.text, self.width - len(ev.tool) - 8)}".rstrip())
        elif k == "tool_result":
            tool = self._tools.get(p.get("tool_use_id") or "", "")
            if p.get("interrupted"):
                if tool != ASK_TOOL:  # the question's own line says it was skipped
                    self.say(bar + t("screen.call_interrupted", tool=tool or t("screen.guard_a_call")))
                return
            if p.get("is_error") and self._said_by_guard(ev.text):
                return  # the guard's line said it, in the person's language
            if p.get("is_error"):
                self.say(f"{bar}x {one_line(ev.text, self.width - 6)}")
            elif tool in ("Agent", "Task") and not sub:
                self.say(t("screen.report", gist=one_line(_gist(_full_text(ev)), self.width - 12)))
            elif self.verbose:
                self.say(f"{bar}  → {one_line(ev.text, self.width - 8)}")
        elif k == "ask":
            self._ask(ev)
        elif k == "retry":
            why = one_line(p.get("error") or "", 100)
            said = t("screen.retry_wait", n=p["attempt"], delay=float(p["delay"])) if "attempt" in p and "delay" in p \
                else ev.text  # the runtime's own line is for the model's side; its numbers say the same
            self.say(f"~ {said}" + (t("screen.retry_why", why=why) if why else ""))
        elif k == "handoff":
            self._handoff(ev)
        elif k == "error":
            self.say(f"{bar}x {one_line(ev.text, self.width - 6)}")
        elif k == "reset":
            pre, post = p.get("pre_tokens"), p.get("post_tokens")
            self.say(t("screen.compacted_sizes", pre=tokens_k(pre), post=tokens_k(post)) if pre and post else t("screen.compacted"))
        elif k == "task":
            if ev.text:
                self.say(f"! {one_line(ev.text, 400)}")
            elif self.verbose and p.get("description"):
                self.say(f"{bar}# {one_line(p.get('description') or '', 80)} {p.get('status') or ''}".rstrip())
        elif k == "prompt":
            if p.get("interrupt") and p.get("by") == "person":  # the person's words; the CLI's note is the model's
                words = one_line(ev.text, self.width - 30)
                self.say(t("screen.interrupt_words", words=words) if words else t("screen.interrupt_plain"))
            elif self.verbose:
                self.say(f"{bar}  » {one_line(ev.text, self.width - 8)}")
        elif k == "system":
            if self.verbose and ev.text == "init" and p.get("session_id"):
                self.say(f"{bar}- session {p['session_id']}")
        elif k in ("result", "unknown"):
            return
        elif self.verbose:
            self.say(one_line(str(ev), self.width))

    def denied(self, fields: dict[str, Any], *, who: str = "") -> None:
        """A guard's denial (an audit ``deny``): one line in the person's language; the guard's own sentence is
        the model's and stays in the events (``--json``). The tool result that repeats it is not drawn again."""
        said = guard_said(fields)
        reason = str(fields.get("reason") or "")
        if reason:
            self._denials[reason] = said
        tool = str(fields.get("tool") or "") or t("screen.guard_a_call")
        self.say(t("screen.guard", who=who or str(fields.get("role") or "agent"), tool=tool,
                   why=one_line(said, self.width - 30)))

    def _said_by_guard(self, text: str) -> bool:
        return any(reason in text or text in reason for reason in self._denials if text.strip())

    def _ask(self, ev: Any) -> None:
        p = ev.payload or {}
        if p.get("kind") == "mail":
            where = (t("screen.mail_saved") if self.brief_path is not None and self.brief_path.exists()
                     else t("screen.mail_unsaved"))
            self.say(t("screen.mail", where=where))
            return
        state, qid = p.get("state"), str(p.get("id") or "")
        waited = qid in self._seen_asks
        if state == "asked":
            self._open_asks.add(qid)
        else:
            self._open_asks.discard(qid)
        if state == "asked" or not waited:
            self._seen_asks.add(qid)
            lines = clean(ev.text).strip().splitlines() or [""]
            self.say(f"  ? {lines[0]}")
            for line in lines[1:]:
                self.say(f"    {line}")
            for i, opt in enumerate(p.get("options") or [], 1):
                self.say(f"     {i}) {clean(opt)}")
            if state == "asked" and isinstance(p.get("remaining"), int) and p["remaining"] >= 0:
                self.say(t("screen.asks_left", n=p["remaining"]))
            if state == "asked":
                self.refresh()
                return
        if state == "answered":
            self.say(f"  + {one_line(p.get('answer') or t('screen.empty_reply'), self.width - 6)}")
        elif state == "timeout" and not waited:
            self.say(t("screen.unattended"))
        elif state == "timeout":
            self.say(t("screen.no_answer"))
        elif state == "over_budget":
            self.say(t("screen.over_budget"))
        elif state == "declined":
            why = p.get("answer") or ""
            self.say(t("screen.declined_why", why=why) if why else t("screen.declined"))
        elif state == "invalid":
            self.say(t("screen.invalid"))
        self.refresh()

    def _handoff(self, ev: Any) -> None:
        p = ev.payload or {}
        phase = p.get("phase")
        if phase == "near":
            self.say(t("screen.near", used=tokens_k(int(p.get("used") or 0)), at=tokens_k(int(p.get("at") or 0))))
        elif phase == "writing":
            self.say(t("screen.writing"))
        elif phase == "done":
            if p.get("degraded"):
                self.say(t("screen.degraded"))
            if p.get("path"):
                self.say(t("screen.handoff_at", path=doc(tilde(p["path"]))))
            self.say(t("screen.new_session"))
        else:
            self.say(f"# {one_line(ev.text, self.width)}")

    # -- attempts (from the runtime) ---------------------------------------------------
    def attempt(self, label: str) -> None:
        self.label = label
        self._busy, self._context = True, 0
        self._alive()
        if "·判定#" in label:
            self.say(t("screen.judging", label=name(label)))
        elif "#round" in label:
            self.say(t("screen.round", label=name(label)))
        elif "#retry" in label:
            self.say(t("screen.retry", label=name(label)))

    def attempt_done(self, r: Any, total: float) -> None:
        self._busy = False
        bits = [f"${r.cost_usd:.4f}", t("screen.turns", n=r.num_turns), f"{r.duration_s:.1f}s"]
        if r.context:
            bits.append(t("screen.context", k=tokens_k(r.context)))
        if r.attempts > 1:
            bits.append(t("screen.attempts", n=r.attempts))
        if r.retired:
            bits.append(t("screen.retired", n=len(r.retired)))
        bits.append(t("screen.total", cost=total))
        if r.ok:
            self.say(f"+ {name(r.step)} · " + " · ".join(bits))
        else:
            self.say(t("screen.step_failed", step=name(r.step), error=one_line(r.error or t("once.unknown_error"), 200),
                       bits=" · ".join(bits)))


GUARDS = ("whitelist", "delegate", "isolation")
"""The guards whose denials the catalogue says in English (``guard.<name>``); another one is said generically."""


def guard_said(fields: dict[str, Any]) -> str:
    """What a guard's denial means, for a person: in Chinese its own sentence (the reference's, written for the
    model); in English the catalogue's rendering of what happened, by the guard's name and the call's fields."""
    reason, guard = str(fields.get("reason") or ""), str(fields.get("guard") or "")
    if language() == "zh" and reason:
        return reason
    role = name(str(fields.get("role") or "agent"))
    tool = str(fields.get("tool") or "") or t("screen.guard_a_call")
    return t(f"guard.{guard}" if guard in GUARDS else "guard.other", role=role, tool=tool, guard=guard or "?")


_HEADING_LINE = re.compile(r"(?P<hashes>#{1,6})[ \t]*(?P<word>\S+?)[ \t]*")


def _glossed(line: str) -> str:
    """A heading line of a run's text that the reference fixes (the judge's ``## 结论``), glossed in English like a
    step name (``## 结论 (verdict)``); any other line as it is."""
    m = _HEADING_LINE.fullmatch(line)
    return f"{m['hashes']} {heading(m['word'])}" if m and m["word"] in HEADINGS else line


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
