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

The class is a facade over small parts, each tested on its own: the ask book (the
question state machine, ``asks.py``), the Q&A log (``qalog.py``), the MCP server
factory (``channel_tools.py``) and the thread bridge (``bridge.py``). What is left here
is the policy that ties them: budgets, waits, the answer source, amending the brief.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import structlog
from claude_agent_sdk import McpSdkServerConfig

from .answers import ASK_ID, Answers, ChannelClosed, MailboxAnswers, duration_text
from .asks import Ask, AskBook, AskState, FinalState, Mail, pick
from .bridge import call_soon
from .channel_tools import ASK_TOOL, INBOX_TOOL, SERVER, channel_server
from .events import Event
from .qalog import QaLog, now, quote

__all__ = [
    "Ask", "AskState", "Mail", "HumanChannel", "Answers", "ChannelClosed", "MailboxAnswers", "pick",
    "OVER_BUDGET", "TIMEOUT", "DECLINED", "ASK_TOOL", "INBOX_TOOL",
]

_log = structlog.get_logger("flower.channel")

DECIDE = "请你自己做决定,把你的假设写下来(写进笔记和最终回复),然后继续。"
# What the model reads when nobody answers. {max_asks}, {waited} and {reason} are filled in when present.
OVER_BUDGET = "提问次数已用完(最多 {max_asks} 次),这个问题没有发给任何人。" + DECIDE
TIMEOUT = "没有人回答({waited})。" + DECIDE
DECLINED = "对方跳过了这个问题{reason}。" + DECIDE
INVALID = "question 不能为空:写下你要问的问题。"
AMEND_LABEL = "运行中补充"
CLOSED = "提问渠道已关闭"


@runtime_checkable
class ReportsErrors(Protocol):
    """An answer source with an ``on_error`` slot: the channel fills it with its Q&A log's ``note``."""

    on_error: Callable[[str], None] | None


def implements(source: Answers, method: str) -> bool:
    """Whether ``source`` really has optional ``method`` — not absent, not the Protocol's default.

    How the SDK's session-store helpers probe a ``SessionStore``: a duck-typed source need not
    subclass ``Answers``; one that does inherits the defaults as "absent" markers.
    """
    impl = getattr(type(source), method, None)
    return callable(impl) and impl is not getattr(Answers, method, None)


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
        self.amend_path = Path(amend_path) if amend_path is not None else None
        self.over_budget_text = over_budget_text
        self.timeout_text = timeout_text
        self.declined_text = declined_text
        self.book = AskBook()
        self.log = QaLog(Path(log_path) if log_path is not None else None)
        self.mail: list[Mail] = []
        self.ui_errors: list[str] = []
        self.asked = 0  # questions that actually reached someone
        self.closed = False
        self._answers: Answers | None = None
        self.answers = answers
        self._loop: asyncio.AbstractEventLoop | None = None
        self._sources: set[asyncio.Task[None]] = set()

    # -- configuration -----------------------------------------------------
    @property
    def asks(self) -> list[Ask]:
        """Every question asked through this channel, oldest first."""
        return self.book.asks

    @property
    def log_path(self) -> Path | None:
        return self.log.path

    @property
    def answers(self) -> Answers | None:
        return self._answers

    @answers.setter
    def answers(self, source: Answers | None) -> None:
        if source is not None and isinstance(source, ReportsErrors) and source.on_error is None:
            source.on_error = self.note  # a source that reports problems reports them to the Q&A log
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

    def mcp_servers(self) -> dict[str, McpSdkServerConfig]:
        """``{"human": <in-process MCP server>}`` for AgentSpec.mcp_servers; ask and inbox together."""
        return {SERVER: channel_server(self, self.timeout_s)}

    # -- asking ------------------------------------------------------------
    async def ask(self, question: str, options: list[str] | None = None) -> Ask:
        """Ask the person and wait. Never raises except CancelledError: read ``Ask.state``."""
        question = (question or "").strip() if isinstance(question, str) else ""
        opts = [o.strip() for o in options or [] if isinstance(o, str) and o.strip()]
        a = self.book.new(question, opts)
        if not question:
            return self._settle_now(a, "invalid", INVALID)
        self.log.question(a.id, a.question, a.options)
        if self.closed:
            return self._settle_now(a, "declined", CLOSED)
        if self.max_asks is not None and self.asked >= self.max_asks:
            return self._settle_now(a, "over_budget")
        if self.timeout_s is not None and self.timeout_s <= 0:
            return self._settle_now(a, "timeout")
        loop = asyncio.get_running_loop()
        self._loop = loop
        self.asked += 1
        done = self.book.wait_on(a, loop)
        self.book.offer(a)
        self._emit(a.event(self.remaining))
        source = asyncio.ensure_future(self._from_source(a)) if self._answers is not None else None
        if source is not None:
            self._sources.add(source)
        try:
            await asyncio.wait({done}, timeout=self.timeout_s)
            self.book.settle(a, "timeout")  # a no-op when it was settled in time
        except asyncio.CancelledError:
            if self.book.settle(a, "declined", "提问被取消"):
                self.note(f"#{a.id} 提问被取消(运行被中止)")
                self._emit(a.event(self.remaining))
            raise
        finally:
            self.book.forget(a)
            if source is not None:
                self._sources.discard(source)
                source.cancel()
                await asyncio.gather(source, return_exceptions=True)  # the source withdraws its question
        self._log_answer(a)
        self._emit(a.event(self.remaining))
        return a

    async def next_ask(self, timeout: float | None = None) -> Ask | None:
        """Pull mode: the next question still waiting for an answer; None when ``timeout`` runs out."""
        self._loop = asyncio.get_running_loop()
        return await self.book.next(timeout)

    def pending(self) -> list[Ask]:
        """Questions waiting for an answer right now."""
        return self.book.pending()

    def answer(self, ask_id: str, text: str) -> bool:
        """Answer a question (any thread). False: it is no longer waiting (timed out, already answered)."""
        a = self.book.find(ask_id)
        return a is not None and self.book.settle(a, "answered", (text or "").strip())

    def decline(self, ask_id: str, reason: str = "") -> bool:
        """Skip a question (any thread): the model is told to decide itself."""
        a = self.book.find(ask_id)
        return a is not None and self.book.settle(a, "declined", (reason or "").strip())

    def close(self) -> None:
        """Nobody will answer any more: pending and later questions end as declined."""
        self.closed = True
        for a in self.pending():
            self.book.settle(a, "declined", CLOSED)

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
        with self.book.lock:
            m = Mail(f"m{len(self.mail) + 1}-{uuid4_hex(6)}", text)
            self.mail.append(m)
        call_soon(self._loop, self._mail_arrived, m)
        return m

    def pending_mail(self) -> list[Mail]:
        """Messages the model has not taken yet."""
        with self.book.lock:
            return [m for m in self.mail if not m.taken]

    def inbox(self) -> list[str]:
        """What the inbox tool returns: unread messages (the source's included), oldest first; marks them read."""
        if self._answers is not None:
            try:
                texts = [t for t in self._answers.inbox() if t and t.strip()]
            except Exception as e:  # noqa: BLE001 - a broken source must not break the tool; the log says so
                self.note(f"读取主动消息出错:{e!r}")
                texts = []
            for t in texts:
                self.send(t)
        with self.book.lock:
            taken = [m for m in self.mail if not m.taken]
            for m in taken:
                m.taken = True
        return [m.text for m in taken]

    def take_interrupt(self) -> str | None:
        """The source's interrupt words, if the person interrupted there ("" = without a word); once.

        The runtime polls this; a UI in the same process calls ``Runtime.interrupt`` directly.
        A source without interrupts (``Answers.take_interrupt`` not implemented) never has any.
        """
        source = self._answers
        if source is None or not implements(source, "take_interrupt"):
            return None
        words = source.take_interrupt()
        if words is not None:
            self.log.interrupt(words)
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
            with self.log.lock:
                old = self.amend_path.read_text(encoding="utf-8") if self.amend_path.exists() else ""
                if said in old:
                    return False
                sep = "" if not old or old.endswith("\n\n") else ("\n" if old.endswith("\n") else "\n\n")
                self.amend_path.parent.mkdir(parents=True, exist_ok=True)
                with open(self.amend_path, "a", encoding="utf-8") as f:
                    f.write(f"{sep}## {label}({now(minutes=True)})\n\n{said}\n")
        except (OSError, UnicodeDecodeError) as e:
            self.note(f"没能把补充写进 {self.amend_path}:{e}")
            return False
        self.log.amended(label, self.amend_path.name, said)
        return True

    def transcript(self) -> str:
        """The Q&A record of this channel, as markdown (what the log file got from this process)."""
        return self.log.transcript()

    def note(self, text: str) -> None:
        """A line for the Q&A log (errors in answer files and the like); also to structlog."""
        _log.warning("channel.note", text=text)
        self.log.note(text)

    # -- internals -------------------------------------------------------------
    def _settle_now(self, a: Ask, state: FinalState, text: str = "") -> Ask:
        """A question that never waits (invalid, over budget, no one watching, closed)."""
        self.book.settle(a, state, text)
        if state != "invalid":
            self._log_answer(a)
        self._emit(a.event(self.remaining))
        return a

    async def _from_source(self, a: Ask) -> None:
        assert self._answers is not None
        ASK_ID.set(a.id)  # this task's own context: the source names the question as the ask event does
        try:
            text = await self._answers.get(a.question, list(a.options) or None, self.timeout_s)
        except asyncio.CancelledError:
            raise
        except ChannelClosed as e:
            self.closed = True
            self.note(f"{CLOSED}:{e}" if str(e) else CLOSED)
            self.book.settle(a, "declined", CLOSED)
            return
        except Exception as e:  # noqa: BLE001 - a broken source must not crash the run; the log says so loudly
            self.note(f"#{a.id} 提问渠道出错,按跳过处理:{e!r}")
            self.book.settle(a, "declined", "提问渠道出错")
            return
        if text is None:
            self.book.settle(a, "timeout")
        else:
            self.book.settle(a, "answered", text.strip())

    def _mail_arrived(self, m: Mail) -> None:
        self.log.mail(m.text)
        self._emit(m.event())
        self.amend(m.text)

    def _emit(self, ev: Event) -> None:
        if self.on_event is None:
            return
        try:
            self.on_event(ev)
        except Exception as e:  # noqa: BLE001 - a UI's failure must not stop the run; kept in ui_errors
            self.ui_errors.append(f"{type(e).__name__}: {e}")

    def _log_answer(self, a: Ask) -> None:
        if a.state == "answered":
            body = quote(a.answer) if a.answer else "(空回复)"
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
        self.log.answer(a.id, a.state, body)


def _fill(template: str, **values: Any) -> str:
    """str.format for user-supplied texts: a text without (or with unknown) placeholders is used as is."""
    try:
        return template.format(**values)
    except (KeyError, IndexError, ValueError):
        return template


def uuid4_hex(n: int) -> str:
    return uuid.uuid4().hex[:n]
