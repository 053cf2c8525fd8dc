"""HumanChannel: the one way an agent reaches a person.

The model gets two tools that always come together — ``ask`` (a question that
blocks until the person answers, the wait runs out, or the question budget is
spent) and ``inbox`` (what the person said meanwhile without being asked). A run
with nobody watching must not hang, so "nobody answered" is a normal outcome
with a clear instruction: decide yourself and write the assumption down.

Where answers come from is pluggable: a terminal (``TerminalAnswers``) or a
mailbox folder that the service reads and writes (``MailboxAnswers``). Every
question, answer and unsolicited message lands in the Q&A log (问答记录.md), so
what the person said is never only in a model's context.
"""

from __future__ import annotations

import asyncio
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
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Literal, Protocol, TextIO

import structlog
from claude_agent_sdk import create_sdk_mcp_server, tool

_log = structlog.get_logger("flower.channel")

AnswerState = Literal["answered", "timeout", "limit", "closed"]

SERVER = "human"
ASK_TOOL = f"mcp__{SERVER}__ask"
INBOX_TOOL = f"mcp__{SERVER}__inbox"

NO_MESSAGES = "没有新消息"
_CLI_MAX_MS = 2_147_483_647  # the CLI clamps MCP tool timeouts to this
_DECIDE = "请你自己做决定,把你的假设写下来(写进笔记和最终回复),然后继续。"
ASK_DESCRIPTION = (
    "向人提一个问题并等待回答。只在你确实无法自己判断、而且猜错代价大时才问;一次只问一件事,问具体。"
    "给了 options 时,人可以回编号或原文。没人回答时会明确告诉你,那时就自己决定并写下假设。"
)
INBOX_DESCRIPTION = "查看人在你工作期间主动发来的消息(读过即清空)。开始一块新工作前看一眼;没有时返回“没有新消息”。"


@dataclass(frozen=True)
class Answer:
    """What came back from one question.

    state: "answered", "timeout" (nobody answered in time, or timeout_s=0),
    "limit" (max_asks used up, nobody was asked) or "closed" (the channel can no
    longer reach anyone). choice: index into the options when the answer picked
    one by number (1-based, as shown) or by its exact text.
    """

    state: AnswerState
    text: str = ""
    choice: int | None = None

    @property
    def answered(self) -> bool:
        return self.state == "answered"


class ChannelClosed(Exception):
    """Raised by an answer source when nobody can answer any more (e.g. stdin closed)."""


class Answers(Protocol):
    """Where answers come from. ``get`` may ignore ``timeout``: HumanChannel enforces it."""

    async def get(self, question: str, options: list[str] | None, timeout: float | None) -> str | None: ...

    def inbox(self) -> list[str]:
        """Messages sent without being asked, oldest first; taking them clears them."""
        ...

    def take_interrupt(self) -> str | None:
        """The person's interrupt words, if any, cleared once taken."""
        ...


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


class HumanChannel:
    """Questions to a person, their unsolicited messages and interrupts, and brief amendments.

    timeout_s: how long one ask waits (None waits forever, 0 never waits — use 0
    when nobody watches). max_asks: questions allowed in total (None: no limit).
    """

    server_name = SERVER
    tool_name = ASK_TOOL
    inbox_tool_name = INBOX_TOOL

    def __init__(
        self,
        *,
        log_path: str | Path | None = None,
        amend_path: str | Path | None = None,
        max_asks: int | None = None,
        timeout_s: float | None = 1800.0,
        answers: Answers | None = None,
    ) -> None:
        self.log_path = Path(log_path) if log_path is not None else None
        self.amend_path = Path(amend_path) if amend_path is not None else None
        self.max_asks = max_asks
        self.timeout_s = None if timeout_s is None else max(0.0, float(timeout_s))
        self.answers: Answers = answers if answers is not None else TerminalAnswers()
        if getattr(self.answers, "on_error", ...) is None:  # a source that reports problems: into our log
            self.answers.on_error = self.note  # type: ignore[attr-defined]
        self.asked = 0
        self.closed = False
        self._n = 0
        self._pending: set[asyncio.Task[str | None]] = set()
        self._write_lock = threading.Lock()

    @property
    def tool_names(self) -> list[str]:
        return [self.tool_name, self.inbox_tool_name]

    # -- asking ------------------------------------------------------------
    async def ask(self, question: str, options: list[str] | None = None) -> Answer:
        """Ask the person; never raises for "nobody answered" — look at ``Answer.state``."""
        question = (question or "").strip()
        if not question:
            raise ValueError("HumanChannel.ask needs a non-empty question")
        opts = [o.strip() for o in options or [] if isinstance(o, str) and o.strip()] or None
        self._n += 1
        n = self._n
        self._log_question(n, question, opts)
        if self.closed:
            return self._done(n, Answer("closed"))
        if self.max_asks is not None and self.asked >= self.max_asks:
            return self._done(n, Answer("limit"))
        if self.timeout_s == 0:
            return self._done(n, Answer("timeout"))
        self.asked += 1
        task = asyncio.ensure_future(self.answers.get(question, opts, self.timeout_s))
        self._pending.add(task)
        try:
            text = await asyncio.wait_for(task, self.timeout_s)
        except TimeoutError:
            return self._done(n, Answer("timeout"))
        except asyncio.CancelledError:
            me = asyncio.current_task()
            if self.closed and not (me and me.cancelling()):
                return self._done(n, Answer("closed"))
            self.note(f"#{n} 提问被取消(运行被中止)")
            raise
        except ChannelClosed as e:
            self.closed = True
            self.note(f"提问渠道已关闭:{e}" if str(e) else "提问渠道已关闭")
            return self._done(n, Answer("closed"))
        except Exception as e:  # a broken source must not crash the run; say so loudly instead
            self.note(f"#{n} 提问渠道出错,按无人回答处理:{e!r}")
            return self._done(n, Answer("closed"))
        finally:
            self._pending.discard(task)
        if text is None:
            return self._done(n, Answer("timeout"))
        return self._done(n, Answer("answered", text.strip(), pick(text, opts)))

    def close(self) -> None:
        """Nobody will answer any more: pending and later asks end as "closed"."""
        self.closed = True
        for task in list(self._pending):
            task.cancel()

    def reply_text(self, answer: Answer, options: list[str] | None = None) -> str:
        """What the model reads as the ask tool's result."""
        if answer.state == "answered":
            if answer.choice is not None and options:
                return options[answer.choice]
            return answer.text or f"对方回复了空内容,没有给出具体意见。{_DECIDE}"
        if answer.state == "limit":
            return f"提问次数已用完(最多 {self.max_asks} 次),这个问题没有发给任何人。{_DECIDE}"
        if answer.state == "closed":
            return f"提问渠道已关闭,没有人会回答。{_DECIDE}"
        if self.timeout_s == 0:
            return f"现在没有人值守,这个问题不会有人回答。{_DECIDE}"
        return f"等了 {_duration(self.timeout_s)},没有人回答。{_DECIDE}"

    # -- the person's own words --------------------------------------------
    def inbox(self) -> list[str]:
        """Messages the person sent without being asked; taking them clears them (and logs them)."""
        try:
            messages = [m for m in self.answers.inbox() if m.strip()]
        except Exception as e:
            self.note(f"读取主动消息出错:{e!r}")
            return []
        for m in messages:
            self._append(f"### {_now()} · 主动消息\n\n{_quote(m)}\n")
        return messages

    def take_interrupt(self) -> str | None:
        """The person's interrupt words, if they interrupted; cleared once taken. The runtime polls this."""
        take = getattr(self.answers, "take_interrupt", None)
        words = take() if take else None
        if words is not None:
            self._append(f"### {_now()} · 打断\n\n{_quote(words) if words.strip() else '(没有留话)'}\n")
        return words

    def amend(self, said: str, *, label: str = "补充") -> bool:
        """Append the person's sentence to the brief under ``## {label}`` — once.

        If the sentence is already in the file nothing is written and False is
        returned, so a wake-up that repeats the same words does not pile them up.
        """
        if self.amend_path is None:
            raise ValueError("HumanChannel.amend needs amend_path= (the brief file to append to)")
        said = (said or "").strip()
        if not said:
            return False
        with self._write_lock:
            text = self.amend_path.read_text(encoding="utf-8") if self.amend_path.exists() else ""
            if said in text:
                return False
            sep = "" if not text or text.endswith("\n\n") else ("\n" if text.endswith("\n") else "\n\n")
            self.amend_path.parent.mkdir(parents=True, exist_ok=True)
            with open(self.amend_path, "a", encoding="utf-8") as f:
                f.write(f"{sep}## {label}({_now(minutes=True)})\n\n{said}\n")
        self._append(f"### {_now()} · {label}(已写入 {self.amend_path.name})\n\n{_quote(said)}\n")
        return True

    def note(self, text: str) -> None:
        """A line for the Q&A log (errors in answer files and the like); also to structlog."""
        _log.warning("channel.note", text=text)
        self._append(f"### {_now()} · 注意\n\n{text}\n")

    # -- the model's tools -------------------------------------------------
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
        return min(_CLI_MAX_MS, int(self.timeout_s * 1000) + 60_000)

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
            question = str(args.get("question") or "").strip()
            if not question:
                return {"content": [{"type": "text", "text": "question 不能为空:写下你要问的问题。"}], "is_error": True}
            options = [str(o).strip() for o in args.get("options") or [] if str(o).strip()] or None
            answer = await self.ask(question, options)
            return {"content": [{"type": "text", "text": self.reply_text(answer, options)}]}

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
    def _log_question(self, n: int, question: str, options: list[str] | None) -> None:
        body = _quote(question)
        if options:
            body += "\n\n" + "\n".join(f"{i}. {o}" for i, o in enumerate(options, 1))
        self._append(f"### #{n} 问 · {_now()}\n\n{body}\n")

    def _done(self, n: int, answer: Answer) -> Answer:
        if answer.state == "answered":
            body = _quote(answer.text) if answer.text else "(空回复)"
            if answer.choice is not None:
                body += f"\n\n(选了第 {answer.choice + 1} 项)"
        else:
            body = {
                "timeout": "(没有人回答)" if self.timeout_s else "(timeout_s=0,没有等待)",
                "limit": f"(提问次数已用完,最多 {self.max_asks} 次,没有发出)",
                "closed": "(提问渠道已关闭)",
            }[answer.state]
        self._append(f"### #{n} 答 · {_now()} · {answer.state}\n\n{body}\n")
        return answer

    def _append(self, block: str) -> None:
        if self.log_path is None:
            return
        with self._write_lock:
            self.log_path.parent.mkdir(parents=True, exist_ok=True)
            new = not self.log_path.exists() or self.log_path.stat().st_size == 0
            with open(self.log_path, "a", encoding="utf-8") as f:
                f.write(("# 问答记录\n\n" if new else "\n") + block)


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
