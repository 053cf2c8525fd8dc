"""Text for a terminal: the one writer to stdout and stderr, which cleans every byte of what a terminal would
obey; model and tool output made short, paths and token counts made readable.

Whatever a run controls (a model's text, a tool name, an ask, a file path) may carry escape sequences: OSC 52
writes the clipboard, OSC 0/2 sets the title, CSI 2J clears the screen, a bidi override or a carriage return
makes text read as something else. So no command writes to a stream itself: every line goes through
``Terminal`` (``echo``, ``OUT``, ``ERR``, the ``Screen``), whose ``write`` cleans it. Our own colours and cursor
moves are not text: they are emitted by name (``Style``, ``Terminal.erase``), never let through from a string.
"""

from __future__ import annotations

import enum
import os
import re
import sys
import unicodedata
from pathlib import Path
from typing import Any, TextIO

_SEQUENCE = re.compile(
    r"(?:\x1b\[|\x9b)[0-?]*[ -/]*[@-~]?"  # CSI, 7-bit or C1 introducer: cursor moves, clear, colours, reports
    r"|(?:\x1b[\]PX^_]|[\x90\x98\x9d\x9e\x9f])[^\x07\x1b\x9c\n]*(?:\x07|\x1b\\|\x9c)?"  # OSC DCS SOS PM APC to ST
    r"|\x1b[ -/]*[0-~]?")  # every other ESC sequence (charsets, keypad modes, reset), or a lone ESC
"""A whole control sequence goes, so none of its parameters (a clipboard payload, a title) is left as text."""
_ASCII_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")
_HIDDEN = frozenset(("Cc", "Cf", "Cs", "Zl", "Zp"))
"""Unicode categories a terminal does not show as themselves: controls (C0, DEL, C1), format characters (bidi
overrides and isolates, zero-width spaces and joiners, tag characters), lone surrogates, line/paragraph separators."""


def clean(text: Any) -> str:
    """Text from the model, a tool or a service, safe for a terminal: nothing in it moves the cursor, styles,
    retitles, writes the clipboard or reorders what is shown; tabs and newlines stay (a carriage return is a newline).
    """
    s = _SEQUENCE.sub("", str(text or "")).replace("\r\n", "\n").replace("\r", "\n")
    if s.isascii():
        return _ASCII_CONTROL.sub("", s)
    return "".join(c for c in s if c in "\t\n" or unicodedata.category(c) not in _HIDDEN)


class Style(enum.Enum):
    """Our own colours: the only escape sequences that reach a terminal, and only by name."""

    BOLD = "\x1b[1m"
    CYAN = "\x1b[36m"
    GREEN = "\x1b[32m"
    RED = "\x1b[31m"


_RESET = "\x1b[0m"


class Terminal:
    """The one writer to a terminal stream: what is written is cleaned; styles and cursor moves go by name.

    Without a stream it writes to the ``sys.stdout`` (or ``sys.stderr``) of the moment, so a redirect still works.
    """

    def __init__(self, stream: TextIO | None = None, *, err: bool = False) -> None:
        self._stream, self._err = stream, err

    @property
    def stream(self) -> TextIO:
        return self._stream or (sys.stderr if self._err else sys.stdout)

    def write(self, text: str) -> int:
        safe = clean(text)
        self.stream.write(safe)
        return len(text)

    def line(self, text: str = "", *, style: Style | None = None, flush: bool = False) -> None:
        """One line; a ``style`` colours all of it (the text cleaned first)."""
        safe = clean(text)
        self.stream.write(f"{style.value}{safe}{_RESET}\n" if style is not None else safe + "\n")
        if flush:
            self.stream.flush()

    def erase(self, rows_above: int) -> None:
        """Back to the start of the line, ``rows_above`` rows up, and clear to the end of the screen."""
        self.stream.write("\r" + (f"\x1b[{int(rows_above)}A" if rows_above > 0 else "") + "\x1b[J")

    def flush(self) -> None:
        self.stream.flush()

    def isatty(self) -> bool:
        return isatty(self.stream)


OUT = Terminal()
ERR = Terminal(err=True)


def echo(text: str = "", *, err: bool = False, flush: bool = False) -> None:
    """``print`` for the commands: one line, cleaned, to stdout (or stderr)."""
    (ERR if err else OUT).line(text, flush=flush)


def ask(prompt: str) -> str:
    """``input`` with a cleaned prompt."""
    return input(clean(prompt))


def route_library_logs() -> None:
    """structlog, unconfigured, prints to stdout itself: its lines (they may quote run text) go through ``OUT``."""
    import structlog

    if not structlog.is_configured():
        structlog.configure(logger_factory=structlog.PrintLoggerFactory(file=OUT))  # type: ignore[arg-type]


def one_line(text: Any, limit: int = 160) -> str:
    s = " ".join(clean(text).split())
    return s if len(s) <= limit else s[: limit - 1] + "…"


def tokens_k(tokens: int) -> str:
    return f"{tokens / 1000:.1f}K" if tokens < 1_000_000 else f"{tokens / 1_000_000:.2f}M"


def tilde(path: Path | str) -> str:
    s, home = str(path), str(Path.home())
    return "~" + s[len(home):] if home not in ("", "/") and (s == home or s.startswith(home + os.sep)) else s


def isatty(stream: Any) -> bool:
    try:
        return bool(stream is not None and stream.isatty())
    except (ValueError, AttributeError, OSError):
        return False


SIGPIPE_EXIT = 128 + 13
"""What a shell reports for a tool SIGPIPE ended (``yes | head``): flower ends the same way, and quietly."""


def reader_gone() -> int:
    """Whoever read stdout has gone (``flower remote list | head``): nothing more to say, to anyone; the exit status
    to end with. stdout is pointed at /dev/null so that Python's own flush at exit does not fail a second time."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass
    finally:
        os.close(devnull)
    return SIGPIPE_EXIT
