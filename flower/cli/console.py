"""The console: what the person types mid-run, routed to a question, the inbox, the oracle or an interrupt."""

from __future__ import annotations

import asyncio
import atexit
import codecs
import os
import select
import sys
import threading
from typing import Any, Callable

from ..core.asks import numbered
from .messages import t
from .screen import Screen
from .terminal import one_line


PROMPT_ANSWER, PROMPT_IDLE, PROMPT_INTERRUPT = "console.answer", "console.idle", "console.interrupt"
"""Catalogue keys of the three prompts the last line shows."""
ORACLE_WAIT_S = 120.0


def chosen(text: str, options: list[str]) -> str | None:
    """What an answer says: an option's number is that option's text, any other words are themselves;
    None for a number past the options (the person meant one and missed)."""
    n = numbered(text) if options else None
    if n is None:
        return text
    return options[n - 1] if 1 <= n <= len(options) else None


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
        return t(head) + self.typed

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
            self.screen.say(t("console.quit"))
            if self.main is not None:
                self.main.cancel()
            return
        self.interrupting = True
        waiting = len(self.channel.pending()) if self.channel is not None else 0
        self.screen.say(t("console.interrupting"))
        if waiting:
            self.screen.say(t("console.still_waiting", n=waiting))

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
            self.screen.say(t("console.bad_line", error=f"{type(e).__name__}: {e}"))

    def _route(self, line: str) -> None:
        text = line.strip()
        if self.interrupting:
            self.interrupting = False
            self.runtime.interrupt(text)  # thread-safe itself
            self.screen.say(t("console.interrupted") + (t("console.interrupted_with", text=one_line(text, 80)) if text
                                                        else t("console.interrupted_plain"))
                            + t("console.interrupted_when"))
            return
        if text.startswith(("?", "？")):
            question = text[1:].strip()
            if question and self.oracle is not None:
                self.oracles.add(asyncio.run_coroutine_threadsafe(self.oracle(question), self.loop))
            return
        pending = self.channel.pending() if self.channel is not None else []
        if pending:
            if not text:
                self.channel.decline(pending[0].id)
                return
            answer = chosen(text, list(getattr(pending[0], "options", None) or []))
            if answer is None:
                self.screen.say(t("console.no_such_option", n=text, count=len(pending[0].options)))
                return  # the question still waits: asked again on the prompt line
            self.channel.answer(pending[0].id, answer)
            return
        if not text:
            return
        if self.channel is None:
            self.screen.say(t("console.no_channel"))
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
        self.screen.say(t("console.draining", n=len(waiting)))
        await asyncio.wait([asyncio.wrap_future(f) for f in waiting], timeout=timeout)
