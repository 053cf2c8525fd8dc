"""The ask book: every question to the person and its one-way state machine, safe from any thread.

``asked`` → ``answered`` | ``timeout`` | ``declined`` | ``over_budget`` | ``invalid``, exactly
once (``settle``). A waiting asker is woken from whichever thread settles its question; a
pull-mode UI takes the questions still waiting, in order (``offer`` / ``next``).
"""

from __future__ import annotations

import asyncio
import collections
import re
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Literal

from .bridge import wake
from .events import Event

__all__ = ["AskState", "FINAL_STATES", "Ask", "Mail", "AskBook", "pick"]

AskState = Literal["asked", "answered", "timeout", "declined", "over_budget", "invalid"]
FinalState = Literal["answered", "timeout", "declined", "over_budget", "invalid"]
FINAL_STATES: tuple[FinalState, ...] = ("answered", "timeout", "declined", "over_budget", "invalid")


def numbered(text: str) -> int | None:
    """The option number an answer is, in any of the ways people type one ("2", "2.", "2)", "第2个"), else None."""
    m = re.fullmatch(r"(?:第\s*)?(\d{1,3})\s*(?:[.)、:：]|个|项)?", text.strip())
    return int(m[1]) if m else None


def pick(text: str, options: list[str] | None) -> int | None:
    """Index of the option an answer picks: "2", "2.", "第2个" or the option's exact text."""
    if not options:
        return None
    n = numbered(text)
    if n is not None:
        return n - 1 if 1 <= n <= len(options) else None
    folded = text.strip().casefold()
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
    state: AskState = "asked"
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


class AskBook:
    """The questions of one channel and who waits on them."""

    def __init__(self) -> None:
        self.asks: list[Ask] = []
        self.lock = threading.RLock()
        self._n = 0
        self._waiting: dict[str, asyncio.Future[None]] = {}
        self._unclaimed: collections.deque[Ask] = collections.deque()
        self._pullers: collections.deque[asyncio.Future[Ask]] = collections.deque()

    def new(self, question: str, options: list[str]) -> Ask:
        with self.lock:
            self._n += 1
            a = Ask(f"{self._n}-{uuid.uuid4().hex[:8]}", question, options)
            self.asks.append(a)
        return a

    def find(self, ask_id: str) -> Ask | None:
        with self.lock:
            return next((a for a in reversed(self.asks) if a.id == ask_id), None)

    def pending(self) -> list[Ask]:
        with self.lock:
            return [a for a in self.asks if a.state == "asked"]

    # -- the state machine --------------------------------------------------
    def settle(self, a: Ask, state: FinalState, text: str = "") -> bool:
        """Move a waiting question to its final state, once; wakes its asker from any thread."""
        with self.lock:
            if a.state != "asked":
                return False
            a.state, a.answer, a._ended_at = state, text, time.time()
            done = self._waiting.get(a.id)
        if done is not None:
            wake(done)
        return True

    def wait_on(self, a: Ask, loop: asyncio.AbstractEventLoop) -> asyncio.Future[None]:
        """A future resolved when ``a`` is settled (register before offering it)."""
        done: asyncio.Future[None] = loop.create_future()
        with self.lock:
            self._waiting[a.id] = done
        return done

    def forget(self, a: Ask) -> None:
        """The asker stopped waiting (settled, timed out or cancelled)."""
        with self.lock:
            self._waiting.pop(a.id, None)
            if a in self._unclaimed:
                self._unclaimed.remove(a)

    # -- pull mode ------------------------------------------------------------
    def offer(self, a: Ask, *, first: bool = False) -> None:
        """Hand a new question to a waiting ``next``, or keep it for the next one (``first``: before the others —
        one handed to a pull that was cancelled before it could take it)."""
        with self.lock:
            while self._pullers:
                fut = self._pullers.popleft()
                if not fut.done():
                    fut.set_result(a)
                    return
            if first:
                self._unclaimed.appendleft(a)
            else:
                self._unclaimed.append(a)

    async def next(self, timeout: float | None) -> Ask | None:
        """The next question still waiting for an answer; None when ``timeout`` runs out."""
        loop = asyncio.get_running_loop()
        with self.lock:
            while self._unclaimed:
                a = self._unclaimed.popleft()
                if a.state == "asked":
                    return a
            fut: asyncio.Future[Ask] = loop.create_future()
            self._pullers.append(fut)
        try:
            async with asyncio.timeout(timeout):  # not wait_for: on 3.11 it drops a cancel that meets the question
                return await fut
        except TimeoutError:
            return fut.result() if fut.done() and not fut.cancelled() else None  # it came as time ran out
        except asyncio.CancelledError:
            if fut.done() and not fut.cancelled():  # handed over in the pass this pull was cancelled: kept
                self.offer(fut.result(), first=True)
            raise
        finally:
            with self.lock:
                if fut in self._pullers:
                    self._pullers.remove(fut)
