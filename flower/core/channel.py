"""HumanChannel: the one way an agent reaches a person, and a person reaches the run.

An in-process MCP server with two tools that always come together — ``ask`` (a
question that blocks until the person answers, the wait runs out, or the question
budget is spent) and ``inbox`` (what the person said meanwhile without being asked)
— plus the methods a UI needs: push (``on_event``) or pull (``next_ask``), then
``answer`` / ``decline`` / ``send``, callable from any thread.

A run with nobody watching must not hang, so "nobody answered" is a normal outcome
with a clear instruction to the model: decide yourself and write the assumption down.
``ask`` never raises for it (only ``CancelledError`` propagates): look at ``Ask.state``.

Besides a UI, answers may come from a pluggable source (``answers=``): a terminal
(``TerminalAnswers``) or a mailbox folder the service reads and writes
(``MailboxAnswers``). Whichever answers first wins. Every question, answer and
unsolicited message lands in the Q&A log (问答记录.md) and in ``transcript()``.
"""

from __future__ import annotations

import asyncio
import collections
import json
import os
import queue
import re
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Literal, Protocol, TextIO

import structlog
from claude_agent_sdk import create_sdk_mcp_server, tool

from .events import Event

__all__ = [
    "Ask", "Mail", "HumanChannel", "Answers", "ChannelClosed", "TerminalAnswers", "MailboxAnswers", "pick",
    "OVER_BUDGET", "TIMEOUT", "DECLINED",
]

_log = structlog.get_logger("flower.channel")

AskState = Literal["asked", "answered", "timeout", "declined", "over_budget", "invalid"]

SERVER = "human"
ASK_TOOL = f"mcp__{SERVER}__ask"
INBOX_TOOL = f"mcp__{SERVER}__inbox"

NO_MESSAGES = "没有新消息"
DECIDE = "请你自己做决定,把你的假设写下来(写进笔记和最终回复),然后继续。"
# What the model reads when nobody answers. {max_asks}, {waited} and {reason} are filled in when present.
OVER_BUDGET = "提问次数已用完(最多 {max_asks} 次),这个问题没有发给任何人。" + DECIDE
TIMEOUT = "没有人回答({waited})。" + DECIDE
DECLINED = "对方跳过了这个问题{reason}。" + DECIDE
INVALID = "question 不能为空:写下你要问的问题。"
AMEND_LABEL = "运行中补充"

_CLI_MAX_MS = 2_147_483_647  # the CLI clamps MCP tool timeouts to this
ASK_DESCRIPTION = (
    "向人提一个问题并等待回答。只在你确实无法自己判断、而且猜错代价大时才问;一次只问一件事,问具体。"
    "给了 options 时,人可以回编号或原文。没人回答时会明确告诉你,那时就自己决定并写下假设。"
)
INBOX_DESCRIPTION = "查看人在你工作期间主动发来的消息(读过即清空)。开始一块新工作前看一眼;没有时返回“没有新消息”。"


def pick(text: str, options: list[str] | None) -> int | None:
    """Index of the option an answer picks: "2", "2.", "第2个" or the option's exact text."""
    if not options:
        return None
    s = text.strip()
    m = re.fullmatch(r"(?:第\s*)?(\d{1,3})\s*(?:[.)、:：]|个|项)?", s)
    if m:
        n = int(m[1])
        return n - 1 if 1 <= n <= len(options) else None
    folded = s.casefold()
    for i, opt in enumerate(options):
        if opt.strip().casefold() == folded:
            return i
    return None


@dataclass
class Ask:
    """One question to the person. ``state``: asked → answered / timeout / declined / over_budget / invalid."""

    id: str
    question: str
    options: list[str] = field(default_factory=list)
    asked_at: float = field(default_factory=time.time)
    state: str = "asked"
    answer: str = ""
    _ended_at: float | None = field(default=None, init=False, repr=False, compare=False)

    @property
    def waited_s(self) -> float:
        """How long it has waited (until it was settled, once it is)."""
        end = self._ended_at if self._ended_at is not None else time.time()
        return max(0.0, end - self.asked_at)

    def event(self, remaining: int = 0) -> Event:
        return Event("ask", self.question, payload={
            "id": self.id, "options": list(self.options), "state": self.state, "answer": self.answer,
            "remaining": remaining, "asked_at": self.asked_at}, raw=self)

    # -- reading the answer ------------------------------------------------
    @property
    def answered(self) -> bool:
        return self.state == "answered"

    @property
    def text(self) -> str:
        """The answer's text (same as ``answer``)."""
        return self.answer

    @property
    def choice(self) -> int | None:
        """Index of the option the answer picked (by number or exact text), else None."""
        return pick(self.answer, self.options) if self.answered else None


@dataclass
class Mail:
    """Something the person said without being asked; ``taken`` once the model read it (inbox)."""

    id: str
    text: str
    sent_at: float = field(default_factory=time.time)
    taken: bool = False

    def event(self) -> Event:
        return Event("ask", self.text, payload={"kind": "mail", "id": self.id, "sent_at": self.sent_at,
                                                "taken": self.taken}, raw=self)


class ChannelClosed(Exception):
    """Raised by an answer source when nobody can answer any more (e.g. stdin closed)."""


class Answers(Protocol):
    """A pluggable answer source. ``get`` may ignore ``timeout``: HumanChannel enforces it.

    ``get`` returns the answer text, or None for "no answer"; it is cancelled when the
    question is settled another way (a UI answered, the wait ran out).
    """

    async def get(self, question: str, options: list[str] | None, timeout: float | None) -> str | None: ...

    def inbox(self) -> list[str]:
        """Messages sent without being asked, oldest first; taking them clears them."""
        ...


class HumanChannel:
    """Questions to a person, their unsolicited messages and interrupts, and brief amendments.

    ``max_asks``: None = no limit, 0 = asking is forbidden (the tool refuses at once).
    ``timeout_s``: None = wait forever, ``<= 0`` = never wait (every question falls
    through at once — use it when nobody watches). ``remaining`` is -1 without a limit.
    """

    server_name = SERVER
    tool_name = ASK_TOOL
    inbox_name = INBOX_TOOL
    inbox_tool_name = INBOX_TOOL

    def __init__(
        self,
        *,
        on_event: Callable[[Event], None] | None = None,
        max_asks: int | None = None,
        timeout_s: float | None = 1800.0,
        log_path: str | Path | None = None,
        amend_path: str | Path | None = None,
        over_budget_text: str = OVER_BUDGET,
        timeout_text: str = TIMEOUT,
        declined_text: str = DECLINED,
        answers: Answers | None = None,
    ) -> None:
        self.on_event = on_event
        self.max_asks = max_asks
        self.timeout_s = None if timeout_s is None else float(timeout_s)
        self.log_path = Path(log_path) if log_path is not None else None
        self.amend_path = Path(amend_path) if amend_path is not None else None
        self.over_budget_text = over_budget_text
        self.timeout_text = timeout_text
        self.declined_text = declined_text
        self.asks: list[Ask] = []
        self.mail: list[Mail] = []
        self.ui_errors: list[str] = []
        self.asked = 0  # questions that actually reached someone
        self.closed = False
        self._answers: Answers | None = None
        self.answers = answers
        self._n = 0
        self._lock = threading.RLock()
        self._write_lock = threading.Lock()
        self._blocks: list[str] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._waiting: dict[str, asyncio.Future[None]] = {}
        self._unclaimed: collections.deque[Ask] = collections.deque()
        self._pullers: collections.deque[asyncio.Future[Ask]] = collections.deque()
        self._sources: set[asyncio.Task[None]] = set()
        self._interrupt: str | None = None

    # -- configuration -----------------------------------------------------
    @property
    def answers(self) -> Answers | None:
        return self._answers

    @answers.setter
    def answers(self, source: Answers | None) -> None:
        if source is not None and getattr(source, "on_error", ...) is None:  # a source that reports problems
            source.on_error = self.note  # type: ignore[attr-defined]
        self._answers = source

    @property
    def tool_names(self) -> list[str]:
        """Both tools: whoever mounts the server must pre-approve both (the CLI refuses an unlisted MCP tool)."""
        return [self.tool_name, self.inbox_name]

    @property
    def remaining(self) -> int:
        """Questions left; -1 when there is no limit."""
        if self.max_asks is None:
            return -1
        return max(0, self.max_asks - self.asked)

    def mcp_servers(self) -> dict[str, Any]:
        """``{"human": <in-process MCP server>}`` for AgentSpec.mcp_servers; ask and inbox together."""
        server: dict[str, Any] = dict(create_sdk_mcp_server(SERVER, tools=[self._ask_tool(), self._inbox_tool()]))
        # Read by the CLI from --mcp-config: the tools are in the prompt from the start (not deferred
        # behind ToolSearch); a call that waits on a person is never moved to a background task;
        # and the CLI's own per-call limit stays above ours, so our timeout_s is the one that fires.
        server["alwaysLoad"] = True
        server["disableAutoBackground"] = True
        server["timeout"] = self._cli_timeout_ms()
        return {SERVER: server}

    def _cli_timeout_ms(self) -> int:
        if self.timeout_s is None:
            return _CLI_MAX_MS
        return min(_CLI_MAX_MS, int(max(0.0, self.timeout_s) * 1000) + 60_000)

    # -- asking ------------------------------------------------------------
    async def ask(self, question: str, options: list[str] | None = None) -> Ask:
        """Ask the person and wait. Never raises except CancelledError: read ``Ask.state``."""
        question = (question or "").strip() if isinstance(question, str) else ""
        opts = [o.strip() for o in options or [] if isinstance(o, str) and o.strip()]
        with self._lock:
            self._n += 1
            a = Ask(f"{self._n}-{uuid.uuid4().hex[:8]}", question, opts)
            self.asks.append(a)
        if not question:
            return self._settle_now(a, "invalid", INVALID)
        self._log_question(a)
        if self.closed:
            return self._settle_now(a, "declined", "提问渠道已关闭")
        if self.max_asks is not None and self.asked >= self.max_asks:
            return self._settle_now(a, "over_budget")
        if self.timeout_s is not None and self.timeout_s <= 0:
            return self._settle_now(a, "timeout")
        loop = asyncio.get_running_loop()
        self._loop = loop
        self.asked += 1
        done: asyncio.Future[None] = loop.create_future()
        with self._lock:
            self._waiting[a.id] = done
        self._offer(a)
        self._emit(a.event(self.remaining))
        source = asyncio.ensure_future(self._from_source(a)) if self._answers is not None else None
        if source is not None:
            self._sources.add(source)
        try:
            await asyncio.wait({done}, timeout=self.timeout_s)
            self._settle(a, "timeout")  # a no-op when it was settled in time
        except asyncio.CancelledError:
            if self._settle(a, "declined", "提问被取消"):
                self.note(f"#{a.id} 提问被取消(运行被中止)")
                self._emit(a.event(self.remaining))
            raise
        finally:
            with self._lock:
                self._waiting.pop(a.id, None)
                if a in self._unclaimed:
                    self._unclaimed.remove(a)
            if source is not None:
                self._sources.discard(source)
                source.cancel()
                await asyncio.gather(source, return_exceptions=True)  # the source withdraws its question
        self._log_answer(a)
        self._emit(a.event(self.remaining))
        return a

    async def next_ask(self, timeout: float | None = None) -> Ask | None:
        """Pull mode: the next question still waiting for an answer; None when ``timeout`` runs out."""
        loop = asyncio.get_running_loop()
        self._loop = loop
        with self._lock:
            while self._unclaimed:
                a = self._unclaimed.popleft()
                if a.state == "asked":
                    return a
            fut: asyncio.Future[Ask] = loop.create_future()
            self._pullers.append(fut)
        try:
            return await asyncio.wait_for(fut, timeout)
        except TimeoutError:
            return None
        finally:
            with self._lock:
                if fut in self._pullers:
                    self._pullers.remove(fut)

    def pending(self) -> list[Ask]:
        """Questions waiting for an answer right now."""
        with self._lock:
            return [a for a in self.asks if a.state == "asked"]

    def answer(self, ask_id: str, text: str) -> bool:
        """Answer a question (any thread). False: it is no longer waiting (timed out, already answered)."""
        a = self._find(ask_id)
        return a is not None and self._settle(a, "answered", (text or "").strip())

    def decline(self, ask_id: str, reason: str = "") -> bool:
        """Skip a question (any thread): the model is told to decide itself."""
        a = self._find(ask_id)
        return a is not None and self._settle(a, "declined", (reason or "").strip())

    def close(self) -> None:
        """Nobody will answer any more: pending and later questions end as declined."""
        self.closed = True
        for a in self.pending():
            self._settle(a, "declined", "提问渠道已关闭")

    def reply_text(self, a: Ask) -> str:
        """What the model reads as the ask tool's result."""
        if a.state == "answered":
            if a.choice is not None:
                return a.options[a.choice]
            return a.answer or f"对方回复了空内容,没有给出具体意见。{DECIDE}"
        if a.state == "over_budget":
            return _fill(self.over_budget_text, max_asks=self.max_asks)
        if a.state == "declined":
            return _fill(self.declined_text, reason=f":{a.answer}" if a.answer else "")
        if a.state == "invalid":
            return INVALID
        if self.timeout_s is not None and self.timeout_s <= 0:
            waited = "现在没有人值守,这个问题不会有人回答"
        else:
            waited = f"等了 {_duration(self.timeout_s)}"
        return _fill(self.timeout_text, waited=waited)

    # -- the person's own words --------------------------------------------
    def send(self, text: str) -> Mail | None:
        """The person says something unasked (any thread). Does not interrupt; also amends the brief."""
        text = (text or "").strip()
        if not text:
            return None
        with self._lock:
            m = Mail(f"m{len(self.mail) + 1}-{uuid.uuid4().hex[:6]}", text)
            self.mail.append(m)
        self._call(self._mail_arrived, m)
        return m

    def pending_mail(self) -> list[Mail]:
        """Messages the model has not taken yet."""
        with self._lock:
            return [m for m in self.mail if not m.taken]

    def inbox(self) -> list[str]:
        """What the inbox tool returns: unread messages (the source's included), oldest first; marks them read."""
        if self._answers is not None:
            try:
                texts = [t for t in self._answers.inbox() if t and t.strip()]
            except Exception as e:  # noqa: BLE001 - a broken source must not break the tool
                self.note(f"读取主动消息出错:{e!r}")
                texts = []
            for t in texts:
                self.send(t)
        with self._lock:
            taken = [m for m in self.mail if not m.taken]
            for m in taken:
                m.taken = True
        return [m.text for m in taken]

    def interrupt(self, words: str = "") -> None:
        """Ask the running step to stop and continue with these words (any thread; the runtime polls)."""
        with self._lock:
            self._interrupt = words or ""

    def take_interrupt(self) -> str | None:
        """The person's interrupt words if they interrupted ("" = without a word); cleared once taken."""
        with self._lock:
            words, self._interrupt = self._interrupt, None
        if words is None:
            take = getattr(self._answers, "take_interrupt", None)
            words = take() if take else None
        if words is not None:
            self._append(f"### {_now()} · 打断\n\n{_quote(words) if words.strip() else '(没有留话)'}\n")
        return words

    def amend(self, text: str, *, label: str = AMEND_LABEL) -> bool:
        """Append the person's words to ``amend_path`` under ``## {label}`` — once.

        False when nothing was written: no path configured, empty text, the words are
        already in the file (a wake-up repeating itself) or the file could not be written.
        """
        said = (text or "").strip()
        if self.amend_path is None or not said:
            return False
        try:
            with self._write_lock:
                old = self.amend_path.read_text(encoding="utf-8") if self.amend_path.exists() else ""
                if said in old:
                    return False
                sep = "" if not old or old.endswith("\n\n") else ("\n" if old.endswith("\n") else "\n\n")
                self.amend_path.parent.mkdir(parents=True, exist_ok=True)
                with open(self.amend_path, "a", encoding="utf-8") as f:
                    f.write(f"{sep}## {label}({_now(minutes=True)})\n\n{said}\n")
        except (OSError, UnicodeDecodeError) as e:
            self.note(f"没能把补充写进 {self.amend_path}:{e}")
            return False
        self._append(f"### {_now()} · {label}(已写入 {self.amend_path.name})\n\n{_quote(said)}\n")
        return True

    def transcript(self) -> str:
        """The Q&A record of this channel, as markdown (what the log file got from this process)."""
        with self._write_lock:
            return "# 问答记录\n\n" + "\n".join(self._blocks)

    def note(self, text: str) -> None:
        """A line for the Q&A log (errors in answer files and the like); also to structlog."""
        _log.warning("channel.note", text=text)
        self._append(f"### {_now()} · 注意\n\n{text}\n")

    # -- internals: settling a question ----------------------------------------
    def _settle(self, a: Ask, state: str, text: str = "") -> bool:
        """Move a waiting question to its final state, once; wakes its asker from any thread."""
        with self._lock:
            if a.state != "asked":
                return False
            a.state, a.answer, a._ended_at = state, text, time.time()
            done = self._waiting.get(a.id)
        if done is not None:
            _wake(done)
        return True

    def _settle_now(self, a: Ask, state: str, text: str = "") -> Ask:
        """A question that never waits (invalid, over budget, no one watching, closed)."""
        self._settle(a, state, text)
        if state != "invalid":
            self._log_answer(a)
        self._emit(a.event(self.remaining))
        return a

    async def _from_source(self, a: Ask) -> None:
        assert self._answers is not None
        try:
            text = await self._answers.get(a.question, list(a.options) or None, self.timeout_s)
        except asyncio.CancelledError:
            raise
        except ChannelClosed as e:
            self.closed = True
            self.note(f"提问渠道已关闭:{e}" if str(e) else "提问渠道已关闭")
            self._settle(a, "declined", "提问渠道已关闭")
            return
        except Exception as e:  # noqa: BLE001 - a broken source must not crash the run; say so loudly
            self.note(f"#{a.id} 提问渠道出错,按跳过处理:{e!r}")
            self._settle(a, "declined", "提问渠道出错")
            return
        if text is None:
            self._settle(a, "timeout")
        else:
            self._settle(a, "answered", text.strip())

    def _offer(self, a: Ask) -> None:
        """Hand a new question to a waiting ``next_ask``, or keep it for the next one."""
        with self._lock:
            while self._pullers:
                fut = self._pullers.popleft()
                if not fut.done():
                    fut.set_result(a)
                    return
            self._unclaimed.append(a)

    def _find(self, ask_id: str) -> Ask | None:
        with self._lock:
            return next((a for a in reversed(self.asks) if a.id == ask_id), None)

    def _mail_arrived(self, m: Mail) -> None:
        self._append(f"### {_now()} · 主动消息\n\n{_quote(m.text)}\n")
        self._emit(m.event())
        self.amend(m.text)

    def _call(self, fn: Callable[..., None], *args: Any) -> None:
        """Run on the channel's loop when called from another thread, else right here."""
        loop = self._loop
        if loop is not None and loop.is_running() and not loop.is_closed() and not _on_loop(loop):
            try:
                loop.call_soon_threadsafe(fn, *args)
                return
            except RuntimeError:  # the loop closed meanwhile
                pass
        fn(*args)

    def _emit(self, ev: Event) -> None:
        if self.on_event is None:
            return
        try:
            self.on_event(ev)
        except Exception as e:  # noqa: BLE001 - a UI's failure must not stop the run
            self.ui_errors.append(f"{type(e).__name__}: {e}")

    # -- the model's tools -------------------------------------------------
    def _ask_tool(self) -> Any:
        schema = {
            "type": "object",
            "properties": {
                "question": {"type": "string", "description": "要问的问题,具体、一次一件事"},
                "options": {"type": "array", "items": {"type": "string"}, "description": "可选:候选答案"},
            },
            "required": ["question"],
        }

        @tool("ask", ASK_DESCRIPTION, schema)
        async def ask(args: dict[str, Any]) -> dict[str, Any]:
            options = [str(o) for o in args.get("options") or [] if str(o).strip()]
            a = await self.ask(str(args.get("question") or ""), options)
            reply: dict[str, Any] = {"content": [{"type": "text", "text": self.reply_text(a)}]}
            if a.state == "invalid":
                reply["is_error"] = True
            return reply

        return ask

    def _inbox_tool(self) -> Any:
        @tool("inbox", INBOX_DESCRIPTION, {"type": "object", "properties": {}})
        async def inbox(args: dict[str, Any]) -> dict[str, Any]:
            messages = self.inbox()
            if not messages:
                text = NO_MESSAGES
            else:
                text = "人在你工作期间发来的消息(按时间先后):\n" + "\n".join(
                    f"{i}. {m.strip()}" for i, m in enumerate(messages, 1)
                )
            return {"content": [{"type": "text", "text": text}]}

        return inbox

    # -- the log -----------------------------------------------------------
    def _log_question(self, a: Ask) -> None:
        body = _quote(a.question)
        if a.options:
            body += "\n\n" + "\n".join(f"{i}. {o}" for i, o in enumerate(a.options, 1))
        self._append(f"### #{a.id} 问 · {_now()}\n\n{body}\n")

    def _log_answer(self, a: Ask) -> None:
        if a.state == "answered":
            body = _quote(a.answer) if a.answer else "(空回复)"
            if a.choice is not None:
                body += f"\n\n(选了第 {a.choice + 1} 项)"
        elif a.state == "timeout":
            body = "(没有人回答)" if self.timeout_s is None or self.timeout_s > 0 else "(timeout_s=0,没有等待)"
        elif a.state == "over_budget":
            body = f"(提问次数已用完,最多 {self.max_asks} 次,没有发出)"
        elif a.state == "declined":
            body = f"(跳过:{a.answer})" if a.answer else "(跳过)"
        else:
            body = f"({a.state})"
        self._append(f"### #{a.id} 答 · {_now()} · {a.state}\n\n{body}\n")

    def _append(self, block: str) -> None:
        with self._write_lock:
            self._blocks.append(block)
            if self.log_path is None:
                return
            try:
                self.log_path.parent.mkdir(parents=True, exist_ok=True)
                new = not self.log_path.exists() or self.log_path.stat().st_size == 0
                with open(self.log_path, "a", encoding="utf-8") as f:
                    f.write(("# 问答记录\n\n" if new else "\n") + block)
            except OSError as e:  # the log is a record, not the run: never let it stop the run
                _log.warning("channel.log_failed", path=str(self.log_path), error=str(e))


def _wake(fut: asyncio.Future[None]) -> None:
    """Resolve a future from its own loop's thread or any other."""
    def set_() -> None:
        if not fut.done():
            fut.set_result(None)

    loop = fut.get_loop()
    if _on_loop(loop):
        set_()
    elif not loop.is_closed():
        try:
            loop.call_soon_threadsafe(set_)
        except RuntimeError:
            pass


def _on_loop(loop: asyncio.AbstractEventLoop) -> bool:
    try:
        return asyncio.get_running_loop() is loop
    except RuntimeError:
        return False


def _fill(template: str, **values: Any) -> str:
    """str.format for user-supplied texts: a text without (or with unknown) placeholders is used as is."""
    try:
        return template.format(**values)
    except (KeyError, IndexError, ValueError):
        return template


# -- terminal ----------------------------------------------------------------
class TerminalAnswers:
    """Questions printed to a terminal, answers read from stdin.

    One daemon thread reads lines for the life of the process, so a blocking
    read never stalls the event loop nor keeps the process alive at exit, and a
    timed-out ask leaves no orphan reader that would steal the next answer.
    Lines typed while nobody is asking become inbox messages.
    """

    def __init__(self, *, input: TextIO | None = None, output: TextIO | None = None, poll_s: float = 0.05) -> None:
        self._input = input
        self._output = output
        self.poll_s = poll_s
        self._lines: queue.Queue[str | None] = queue.Queue()
        self._reader: threading.Thread | None = None
        self._asking = 0
        self._eof = False
        self._inbox: list[str] = []
        self._interrupt: str | None = None

    async def get(self, question: str, options: list[str] | None, timeout: float | None) -> str | None:
        self._start()
        self._drain()
        if self._eof:
            raise ChannelClosed("终端输入已结束")
        out = self._output or sys.stdout
        lines = [f"\n[提问] {question}"] + [f"  {i}. {o}" for i, o in enumerate(options or [], 1)]
        wait = "一直等" if timeout is None else f"最多等 {_duration(timeout)}"
        lines.append(f"(回复编号或直接写答案,回车发送;{wait})")
        print("\n".join(lines), file=out, flush=True)
        self._asking += 1
        try:
            while True:
                try:
                    line = self._lines.get_nowait()
                except queue.Empty:
                    await asyncio.sleep(self.poll_s)
                    continue
                if line is None:
                    self._eof = True
                    raise ChannelClosed("终端输入已结束")
                return line.rstrip("\r\n")
        finally:
            self._asking -= 1

    def inbox(self) -> list[str]:
        if not self._asking:
            self._drain()
        taken, self._inbox = self._inbox, []
        return taken

    def post(self, text: str) -> None:
        """Queue an unsolicited message (for a front end that reads the terminal itself)."""
        self._inbox.append(text)

    def interrupt(self, words: str) -> None:
        """Set the interrupt slot (a front end's Ctrl-C handler calls this)."""
        self._interrupt = words

    def take_interrupt(self) -> str | None:
        words, self._interrupt = self._interrupt, None
        return words

    def _drain(self) -> None:
        while True:
            try:
                line = self._lines.get_nowait()
            except queue.Empty:
                return
            if line is None:
                self._eof = True
            elif line.strip():
                self._inbox.append(line.rstrip("\r\n"))

    def _start(self) -> None:
        if self._reader is None:
            self._reader = threading.Thread(target=self._read, name="flower-terminal-answers", daemon=True)
            self._reader.start()

    def _read(self) -> None:
        stream = self._input or sys.stdin
        try:
            for line in iter(stream.readline, ""):
                self._lines.put(line)
        except (OSError, ValueError):
            pass
        self._lines.put(None)


# -- mailbox folder ----------------------------------------------------------
class MailboxAnswers:
    """Questions and answers as files in a folder the service shares with the run.

    ``questions/<id>.json`` is an open question ({id, question, options, asked_at,
    timeout_s}); the other side answers with ``answers/<id>.json`` ({"text": ...}).
    ``inbox/`` holds unsolicited messages (consumed when read); ``interrupt.json``
    is the interrupt slot. Every write is temp + rename, so no reader ever sees
    half a file; polling costs one stat per interval.
    """

    def __init__(self, folder: str | Path, *, poll_s: float = 0.1,
                 on_error: Callable[[str], None] | None = None) -> None:
        self.folder = Path(folder)
        self.poll_s = poll_s
        self.on_error = on_error
        self._suspect: dict[Path, tuple[int, int]] = {}

    # -- the run's side ----------------------------------------------------
    async def get(self, question: str, options: list[str] | None, timeout: float | None) -> str | None:
        qid = _new_id()
        qfile = self.folder / "questions" / f"{qid}.json"
        afile = self.folder / "answers" / f"{qid}.json"
        _write_json(qfile, {"id": qid, "question": question, "options": list(options or []),
                            "asked_at": _iso(), "timeout_s": timeout})
        try:
            while True:
                text = self._read_answer(afile)
                if text is not None:
                    return text
                await asyncio.sleep(self.poll_s)
        finally:
            qfile.unlink(missing_ok=True)
            afile.unlink(missing_ok=True)
            self._suspect.pop(afile, None)

    def inbox(self) -> list[str]:
        box = self.folder / "inbox"
        if not box.is_dir():
            return []
        out: list[str] = []
        for path in sorted(p for p in box.iterdir() if not p.name.startswith(".") and p.suffix in (".json", ".txt", ".md")):
            raw = _claim(path)
            if raw is None:
                continue  # another reader took it
            if path.suffix != ".json":
                out.append(raw.strip())
                continue
            try:
                data = json.loads(raw)
                if not isinstance(data, dict) or not isinstance(data.get("text"), str):
                    raise ValueError('需要 {"text": "..."}')
            except ValueError as e:
                _write_text(path.with_name(path.name + ".bad"), raw)
                self._error(f"主动消息文件 {path} 格式不对({e}),已改名为 {path.name}.bad,未送达")
                continue
            out.append(data["text"].strip())
        return out

    def take_interrupt(self) -> str | None:
        raw = _claim(self.folder / "interrupt.json")
        if raw is None:
            return None
        try:
            data = json.loads(raw)
            if isinstance(data, dict) and isinstance(data.get("words"), str):
                return data["words"]
            if isinstance(data, str):
                return data
        except ValueError:
            pass
        self._error(f"打断文件 {self.folder / 'interrupt.json'} 不是 {{\"words\": ...}},按原文当作打断的话")
        return raw.strip()

    # -- the other side (service, tests) -----------------------------------
    @staticmethod
    def post(folder: str | Path, text: str) -> Path:
        """Leave an unsolicited message for the agent's inbox."""
        path = Path(folder) / "inbox" / f"{_new_id()}.json"
        _write_json(path, {"text": text, "sent_at": _iso()})
        return path

    @staticmethod
    def answer(folder: str | Path, qid: str, text: str) -> bool:
        """Answer question ``qid``; False if that question is no longer open (answer written anyway)."""
        if not re.fullmatch(r"[\w.-]+", qid):
            raise ValueError(f"not a question id: {qid!r}")
        open_ = (Path(folder) / "questions" / f"{qid}.json").exists()
        _write_json(Path(folder) / "answers" / f"{qid}.json", {"text": text, "answered_at": _iso()})
        return open_

    @staticmethod
    def interrupt(folder: str | Path, words: str) -> Path:
        """Ask the run to stop and continue with these words (the runtime polls the slot)."""
        path = Path(folder) / "interrupt.json"
        _write_json(path, {"words": words, "at": _iso()})
        return path

    @staticmethod
    def pending(folder: str | Path) -> list[dict[str, Any]]:
        """Open questions, oldest first (unreadable files are skipped)."""
        qdir = Path(folder) / "questions"
        out = []
        for path in sorted(qdir.glob("*.json")) if qdir.is_dir() else []:
            if path.name.startswith("."):
                continue
            try:
                out.append(json.loads(path.read_text(encoding="utf-8")))
            except (OSError, ValueError):
                continue
        return out

    # -- internals ---------------------------------------------------------
    def _read_answer(self, afile: Path) -> str | None:
        try:
            st = afile.stat()
            raw = afile.read_text(encoding="utf-8")
        except FileNotFoundError:
            return None
        except (OSError, UnicodeDecodeError) as e:
            raw, st = f"<unreadable: {e}>", None  # type: ignore[assignment]
        try:
            data = json.loads(raw)
            if not isinstance(data, dict) or not isinstance(data.get("text"), str):
                raise ValueError('需要 {"text": "..."}')
            return data["text"]
        except ValueError as e:
            # A writer that does not rename may be mid-write: only a file that stays bad is bad.
            sig = (st.st_size, st.st_mtime_ns) if st else (-1, -1)
            if self._suspect.get(afile) != sig:
                self._suspect[afile] = sig
                return None
            self._suspect.pop(afile, None)
            bad = afile.with_name(afile.name + ".bad")
            try:
                afile.replace(bad)
            except OSError:
                pass
            self._error(f"答案文件 {afile} 格式不对({e}),按未回答处理,已改名为 {bad.name};"
                        '请重新写成 {"text": "你的回答"}')
            return None

    def _error(self, text: str) -> None:
        if self.on_error is not None:
            self.on_error(text)
        else:
            _log.warning("channel.mailbox_error", text=text)


# -- helpers -----------------------------------------------------------------
def _now(*, minutes: bool = False) -> str:
    return datetime.now().strftime("%Y-%m-%d %H:%M" if minutes else "%Y-%m-%d %H:%M:%S")


def _iso() -> str:
    return datetime.now().astimezone().isoformat(timespec="seconds")


def _new_id() -> str:
    """Sortable by time, unique across processes."""
    return f"{time.strftime('%Y%m%dT%H%M%S')}-{time.time_ns() % 1_000_000_000:09d}-{uuid.uuid4().hex[:6]}"


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "无限期"
    if seconds >= 3600 and seconds % 3600 == 0:
        return f"{int(seconds // 3600)} 小时"
    if seconds >= 60 and seconds % 60 == 0:
        return f"{int(seconds // 60)} 分钟"
    return f"{seconds:g} 秒"


def _quote(text: str) -> str:
    return "\n".join(f"> {line}" if line else ">" for line in text.strip().splitlines())


def _write_text(path: Path, text: str) -> None:
    """Temp + rename in the same folder: readers see the old file or the new one, never half."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _write_json(path: Path, data: Any) -> None:
    _write_text(path, json.dumps(data, ensure_ascii=False, indent=2) + "\n")


def _claim(path: Path) -> str | None:
    """Take a file exactly once: rename it away first, so two readers never both get it."""
    taken = path.with_name(f".{path.name}.taken-{os.getpid()}-{uuid.uuid4().hex[:6]}")
    try:
        os.rename(path, taken)
    except FileNotFoundError:
        return None
    try:
        return taken.read_text(encoding="utf-8", errors="replace")
    finally:
        taken.unlink(missing_ok=True)
