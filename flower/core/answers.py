"""Answer sources: a person's answers from outside the run's process — a folder the service shares.

``MailboxAnswers`` reads and writes files in a folder the service shares with the run and plugs in
as ``HumanChannel(answers=...)``. (A terminal needs no source: the `flower` command answers through
the channel's own UI methods.) Nothing here imports the channel, so the service can work the
mailbox's other side without it.
"""

from __future__ import annotations

import asyncio
import errno
import json
import os
import re
import time
import uuid
from collections.abc import Callable
from contextvars import ContextVar
from datetime import datetime
from pathlib import Path
from typing import Any, Protocol

import structlog

from .errors import FlowerError
from .files import write_atomic

__all__ = ["Answers", "ChannelClosed", "MailboxAnswers", "ASK_ID"]

_log = structlog.get_logger("flower.channel")

ASK_ID: ContextVar[str | None] = ContextVar("flower_ask_id", default=None)
"""The id of the question a source's ``get`` is fetching the answer to (the channel sets it around the call):
a source that names its questions uses it, so the ``ask`` event, the question and its answer share one id."""


class ChannelClosed(FlowerError):
    """Raised by an answer source when nobody can answer any more."""


class Answers(Protocol):
    """A pluggable answer source. ``get`` may ignore ``timeout``: HumanChannel enforces it.

    ``get`` returns the answer text, or None for "no answer"; it is cancelled when the
    question is settled another way (a UI answered, the wait ran out). ``get`` and ``inbox``
    are required. Optional, declared the way the SDK's ``SessionStore`` declares its optional
    methods — the defaults below raise ``NotImplementedError`` and mark the method absent,
    a source need not subclass this Protocol, and the channel probes before calling:

    * ``take_interrupt()`` — the person's interrupt words, once ("" = without a word), or None;
    * ``on_error`` — an attribute; when a source has one and it is None, the channel sets it to
      its Q&A log's ``note``, so the source's problems reach the log.
    """

    async def get(self, question: str, options: list[str] | None, timeout: float | None) -> str | None: ...

    def inbox(self) -> list[str]:
        """Messages sent without being asked, oldest first; taking them clears them."""
        ...

    def take_interrupt(self) -> str | None:
        """Optional: the interrupt slot. Unimplemented = this source carries no interrupts."""
        raise NotImplementedError


# -- mailbox folder ----------------------------------------------------------
class MailboxAnswers:
    """Questions and answers as files in a folder the service shares with the run.

    ``questions/<id>.json`` is an open question ({id, question, options, asked_at,
    timeout_s}); the other side answers with ``answers/<id>.json`` ({"text": ...}).
    ``inbox/`` holds unsolicited messages (consumed when read); ``interrupt.json``
    is the interrupt slot. Every write is temp + rename, so no reader ever sees
    half a file; polling costs one stat per interval.

    ``questions`` (default ``<folder>/questions``) may live elsewhere: the service keeps what it
    writes (answers, messages, interrupts) in a folder the run can read but not change, and the
    run's questions beside its other output. In such a read-only folder nothing can be renamed
    away, so each message and interrupt is taken once by remembering it instead — in ``taken`` (a
    file of the run's own) when given, so that a process started again on the same folder (a run
    resumed after its sandbox was lost) does not take the same message twice.
    """

    def __init__(self, folder: str | Path, *, poll_s: float = 0.1,
                 on_error: Callable[[str], None] | None = None, questions: str | Path | None = None,
                 taken: str | Path | None = None) -> None:
        self.folder = Path(folder)
        self.questions = Path(questions) if questions is not None else self.folder / "questions"
        self.poll_s = poll_s
        self.on_error = on_error
        self._suspect: dict[Path, tuple[int, int]] = {}
        self._taken_file = Path(taken) if taken is not None else None
        self._taken: set[tuple[str, int, int]] = _read_taken(self._taken_file)

    # -- the run's side ----------------------------------------------------
    async def get(self, question: str, options: list[str] | None, timeout: float | None) -> str | None:
        given = ASK_ID.get()
        qid = given if given and re.fullmatch(r"[\w.-]{1,200}", given) else _new_id()
        qfile = self.questions / f"{qid}.json"
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
            _discard(afile)
            self._suspect.pop(afile, None)

    def inbox(self) -> list[str]:
        box = self.folder / "inbox"
        if not box.is_dir():
            return []
        out: list[str] = []
        for path in sorted(p for p in box.iterdir() if not p.name.startswith(".") and p.suffix in (".json", ".txt", ".md")):
            raw = self._claim(path)
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
                try:
                    write_atomic(path.with_name(path.name + ".bad"), raw, private=True)
                except OSError:
                    pass
                self._error(f"主动消息文件 {path} 格式不对({e}),已改名为 {path.name}.bad,未送达")
                continue
            out.append(data["text"].strip())
        return out

    def take_interrupt(self) -> str | None:
        raw = self._claim(self.folder / "interrupt.json")
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
    def pending(folder: str | Path, questions: str | Path | None = None) -> list[dict[str, Any]]:
        """Open questions, oldest first (unreadable files are skipped)."""
        qdir = Path(questions) if questions is not None else Path(folder) / "questions"
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
    def _claim(self, path: Path) -> str | None:
        """Take a file exactly once: renamed away where the folder allows it, else remembered as taken."""
        try:
            return _claim(path)
        except OSError as e:
            if e.errno not in (errno.EROFS, errno.EACCES, errno.EPERM):
                raise
        try:
            st = path.stat()
            key = (path.name, st.st_ino, st.st_mtime_ns)
            if key in self._taken:
                return None
            raw = path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return None
        self._taken.add(key)
        if self._taken_file is not None:
            try:
                with open(self._taken_file, "a", encoding="utf-8") as f:
                    f.write(json.dumps(list(key)) + "\n")
            except OSError as e:
                self._error(f"记不下已取走的邮件 {path.name}({e}):进程重启后它可能再送达一次")
        return raw

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
def _read_taken(path: Path | None) -> set[tuple[str, int, int]]:
    """The mailbox files an earlier process on this folder took (a line each; a torn last line is skipped)."""
    out: set[tuple[str, int, int]] = set()
    if path is None:
        return out
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError:
        return out
    for line in lines:
        try:
            name, ino, mtime = json.loads(line)
            out.add((str(name), int(ino), int(mtime)))
        except (ValueError, TypeError):
            continue
    return out


def duration_text(seconds: float | None) -> str:
    """How long a wait is, in words (what the model and the person read)."""
    if seconds is None:
        return "无限期"
    if seconds >= 3600 and seconds % 3600 == 0:
        return f"{int(seconds // 3600)} 小时"
    if seconds >= 60 and seconds % 60 == 0:
        return f"{int(seconds // 60)} 分钟"
    return f"{seconds:g} 秒"


def _iso() -> str:
    return datetime.now().astimezone().isoformat(timespec="seconds")


def _new_id() -> str:
    """Sortable by time, unique across processes."""
    return f"{time.strftime('%Y%m%dT%H%M%S')}-{time.time_ns() % 1_000_000_000:09d}-{uuid.uuid4().hex[:6]}"


def _write_json(path: Path, data: Any) -> None:
    """Private: what a person typed is nobody else's business."""
    write_atomic(path, json.dumps(data, ensure_ascii=False, indent=2) + "\n", private=True)


def _discard(path: Path) -> None:
    try:
        path.unlink(missing_ok=True)
    except OSError:  # a read-only mailbox: the service clears it when the run ends
        pass


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
