"""The Q&A log (问答记录.md): every question, answer, message, interrupt and note, as markdown.

A record, not the run: a write that fails is logged and never stops anything. ``blocks``
is what this process wrote, ``transcript()`` renders it.
"""

from __future__ import annotations

import threading
from datetime import datetime
from pathlib import Path

import structlog

__all__ = ["QaLog", "quote", "now"]

_log = structlog.get_logger("flower.channel")

TITLE = "# 问答记录\n\n"


def now(*, minutes: bool = False) -> str:
    return datetime.now().strftime("%Y-%m-%d %H:%M" if minutes else "%Y-%m-%d %H:%M:%S")


def quote(text: str) -> str:
    return "\n".join(f"> {line}" if line else ">" for line in text.strip().splitlines())


class QaLog:
    """Markdown blocks, kept in memory and appended to ``path`` when one is given; safe from any thread."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self.blocks: list[str] = []
        self.lock = threading.Lock()

    def append(self, block: str) -> None:
        with self.lock:
            self.blocks.append(block)
            if self.path is None:
                return
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                new = not self.path.exists() or self.path.stat().st_size == 0
                with open(self.path, "a", encoding="utf-8") as f:
                    f.write((TITLE if new else "\n") + block)
            except OSError as e:  # the log is a record, not the run: never let it stop the run
                _log.warning("channel.log_failed", path=str(self.path), error=str(e))

    def transcript(self) -> str:
        with self.lock:
            return TITLE + "\n".join(self.blocks)

    # -- the kinds of block --------------------------------------------------------------------
    def question(self, ask_id: str, question: str, options: list[str]) -> None:
        body = quote(question)
        if options:
            body += "\n\n" + "\n".join(f"{i}. {o}" for i, o in enumerate(options, 1))
        self.append(f"### #{ask_id} 问 · {now()}\n\n{body}\n")

    def answer(self, ask_id: str, state: str, body: str) -> None:
        self.append(f"### #{ask_id} 答 · {now()} · {state}\n\n{body}\n")

    def note(self, text: str) -> None:
        self.append(f"### {now()} · 注意\n\n{text}\n")

    def mail(self, text: str) -> None:
        self.append(f"### {now()} · 主动消息\n\n{quote(text)}\n")

    def interrupt(self, words: str) -> None:
        self.append(f"### {now()} · 打断\n\n{quote(words) if words.strip() else '(没有留话)'}\n")

    def amended(self, label: str, file_name: str, text: str) -> None:
        self.append(f"### {now()} · {label}(已写入 {file_name})\n\n{quote(text)}\n")
