"""HumanChannel: the one way an agent reaches a person, and a person reaches the run.

An in-process MCP server with two tools that always come together — ``ask`` (a
question that blocks until the person answers, the wait runs out, or the question
budget is spent) and ``inbox`` (what the person said meanwhile without being asked)
— plus the methods a UI needs: push (``on_event``) or pull (``next_ask``), then
``answer`` / ``decline`` / ``send``, callable from any thread.

A run with nobody watching must not hang, so "nobody answered" is a normal outcome
with a clear instruction to the model: decide yourself and write the assumption down.
``ask`` never raises for it (only ``CancelledError`` propagates): look at ``Ask.state``.

Besides a UI, answers may come from a pluggable source (``answers=``), such as the
mailbox folder the service reads and writes (``MailboxAnswers``, in ``answers``).
Whichever answers first wins. Every question, answer and unsolicited message
lands in the Q&A log (问答记录.md) and in ``transcript()``.
"""

from __future__ import annotations

import asyncio
import collections
import re
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

import structlog
from claude_agent_sdk import create_sdk_mcp_server, tool

from .answers import Answers, ChannelClosed, MailboxAnswers, duration_text
from .events import Event

__all__ = [
    "Ask", "Mail", "HumanChannel", "Answers", "ChannelClosed", "MailboxAnswers", "pick",
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


class HumanChannel:
    """Questions to a person, their unsolicited messages and interrupts, and brief amendments.

    ``max_asks``: None = no limit, 0 = asking is forbidden (the tool refuses at once).
    ``timeout_s``: None = wait forever, ``<= 0`` = never wait (every question falls
    through at once — use it when nobody watches). ``remaining`` is -1 without a limit.
    """

    server_name = SERVER
    tool_name = ASK_TOOL
    inbox_name = INBOX_TOOL

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
            waited = f"等了 {duration_text(self.timeout_s)}"
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

    def take_interrupt(self) -> str | None:
        """The source's interrupt words, if the person interrupted there ("" = without a word); once.

        The runtime polls this; a UI in the same process calls ``Runtime.interrupt`` directly.
        """
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


# -- helpers -----------------------------------------------------------------
def _now(*, minutes: bool = False) -> str:
    return datetime.now().strftime("%Y-%m-%d %H:%M" if minutes else "%Y-%m-%d %H:%M:%S")


def _quote(text: str) -> str:
    return "\n".join(f"> {line}" if line else ">" for line in text.strip().splitlines())
