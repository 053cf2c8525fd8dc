"""Following a service run in a terminal: its event stream drawn by the same ``Screen`` as a local run, and
(interactively) the same ``Console``: answers, messages and Ctrl-C interrupts go back over the API.

``follow(api, run_id)`` is the reusable part (``flower remote`` and ``flower demo`` use it); it talks only
to the service's public API through ``flower.remote.Remote``.
"""

from __future__ import annotations

import asyncio
import signal
import sys
from collections.abc import Coroutine
from typing import Any

from ..core.events import Event
from ..remote import BadSetting, Question, Remote, RemoteError, RunInfo, StreamEnd, StreamEvent
from .console import Console
from .messages import name, t
from .screen import Screen
from .terminal import isatty

EMPTY_INTERRUPT = "(interrupted from the terminal: carry on)"
"""What an interrupt says when the person pressed Ctrl-C and Enter without words (the API wants some text)."""


class RemoteView:
    """Stream events → the screen: flower Events as the local renderer draws them, plus what only a service
    run has (attempt labels carried on each event, per-session costs, guard denials, checkpoints)."""

    def __init__(self, screen: Screen) -> None:
        self.screen = screen
        self.label = ""
        self.cost = 0.0
        self._reports: dict[str, str] = {}  # a worker's whole report, by the Agent call it answers

    def show(self, item: StreamEvent) -> None:
        if item.step and item.step != self.label and item.kind != "step":
            self.label = item.step
            self.screen.attempt(item.step)  # "工作·判定#1", "工作#round2" … as the local runtime announces them
        if item.kind == "step":
            self.label = item.text
        if item.kind == "result":
            cost = item.payload.get("cost_usd")
            self.cost += float(cost) if isinstance(cost, (int, float)) else 0.0
            turns = item.payload.get("num_turns")
            mark = "x" if item.payload.get("is_error") else "+"
            self.screen.say(t("remote.result", mark=mark, step=name(item.step or "-"), cost=float(cost or 0),
                              n=int(turns or 0), total=self.cost))
            return
        if item.kind == "audit":
            if item.text == "deny":
                self.screen.denied({**item.payload, "tool": item.tool or item.payload.get("tool")})
            elif self.screen.verbose:
                self.screen.say(f"  # audit {item.text} {item.tool}".rstrip())
            return
        if item.kind == "checkpoint":
            if self.screen.verbose:
                self.screen.say(t("remote.checkpoint", commit=str(item.payload.get("commit") or "")[:12]))
            return
        if item.kind == "verify":  # the team's check before a verdict (the sandbox's verify command)
            mark = "+" if item.payload.get("passed") is True else "x"
            self.screen.say(t("remote.verify", mark=mark, summary=" ".join(item.text.split())[:300]))
            return
        if item.kind == "system" and item.text == "sandbox started":
            self.screen.say(t("remote.sandbox_started"))
            return
        if item.kind == "system" and item.payload.get("subtype") == "killed":
            self.screen.say(t("remote.killed"))
            return
        if item.kind == "system" and item.payload.get("subtype") == "resumed":
            cause = str(item.payload.get("cause") or "")
            self.screen.say(t("remote.resumed", why=t(f"remote.resumed.{cause}") if cause in RESUME_CAUSES else cause))
            return
        text = item.text
        if item.kind == "task" and isinstance(item.payload.get("summary"), str) and item.payload.get("tool_use_id"):
            self._reports[str(item.payload["tool_use_id"])] = item.payload["summary"]
        if item.kind == "tool_result":  # the stream cuts a result at 500 characters: the report's gist is past that
            text = self._reports.pop(str(item.payload.get("tool_use_id") or ""), text)
        self.screen.event(Event(item.kind, text, item.tool, dict(item.payload), step=item.step, at=item.at))


RESUME_CAUSES = ("crashed", "vanished", "killed", "unparked")


def said(error: RemoteError | BadSetting) -> str:
    """A client error in the person's language; the service's own sentence as it wrote it."""
    return t("remote.err." + error.key, **error.fields) if error.key else error.message


class RemoteChannel:
    """What the Console needs of a human channel, backed by the API: the open questions come from
    ``GET /questions`` (their ids are the ones ``POST /answers`` takes), lines go to ``/answers`` or ``/messages``."""

    def __init__(self, api: Remote, run_id: str, screen: Screen, loop: asyncio.AbstractEventLoop) -> None:
        self.api, self.run_id, self.screen, self.loop = api, run_id, screen, loop
        self.open: list[Question] = []
        self._answered: set[str] = set()

    def pending(self) -> list[Question]:
        return [q for q in self.open if q.id not in self._answered]

    async def refresh(self) -> None:
        try:
            self.open = await self.api.questions(self.run_id)
        except RemoteError as e:
            self.screen.say(t("remote.questions_unreadable", error=said(e)))
        self.screen.refresh()

    def answer(self, qid: str, text: str) -> None:
        self._answered.add(qid)
        self._send(self.api.answer(self.run_id, qid, text), t("remote.what.answer"))

    def decline(self, qid: str) -> None:
        self.answer(qid, "")  # an empty answer: it decides for itself

    def send(self, text: str) -> None:
        self._send(self.api.message(self.run_id, text), t("remote.what.message"))
        self.screen.say(t("remote.sent"))

    def interrupt(self, text: str) -> None:
        self._send(self.api.interrupt(self.run_id, text or EMPTY_INTERRUPT), t("remote.what.interrupt"))

    def close(self) -> None:
        """End of input: nothing to close on the service, the run keeps its own timeout for questions."""

    def _send(self, call: Coroutine[Any, Any, None], what: str) -> None:
        async def go() -> None:
            try:
                await call
            except RemoteError as e:
                self.screen.say(t("remote.not_delivered", what=what, error=said(e)))
        asyncio.run_coroutine_threadsafe(go(), self.loop)


class _Interrupts:
    """The Console's runtime: only ``interrupt`` is asked of it."""

    def __init__(self, channel: RemoteChannel) -> None:
        self.channel = channel

    def interrupt(self, text: str) -> None:
        self.channel.interrupt(text)


async def follow(api: Remote, run_id: str, *, screen: Screen | None = None, interactive: bool | None = None,
                 after: int = 0, until_asked: bool = False) -> RunInfo:
    """Draw run ``run_id``'s events from ``after`` on until it ends; return the run as it ended.

    ``until_asked`` (not interactive): stop as soon as the run asks a question that is still open — the question
    is on the screen, the run goes on and waits for an answer; the run is returned as it is then.

    Interactive (default: when stdin and stdout are terminals), what the person types answers the oldest
    open question, else goes to the run's inbox; Ctrl-C interrupts the step in flight (the next line is
    what it carries), a second Ctrl-C stops following (the run goes on; ``flower remote attach`` again).
    """
    screen = screen or Screen()
    view = RemoteView(screen)
    loop = asyncio.get_running_loop()
    channel = RemoteChannel(api, run_id, screen, loop)
    if interactive is None:
        interactive = isatty(sys.stdin) and screen.tty
    console: Console | None = None
    if interactive:
        console = Console(screen, channel, _Interrupts(channel), loop, tty=isatty(sys.stdin) and screen.tty)
        console.main = asyncio.current_task()
        console.start()
        try:
            loop.add_signal_handler(signal.SIGINT, console.ctrl_c)
        except (NotImplementedError, RuntimeError, ValueError):
            pass
        await channel.refresh()
    try:
        async for item in api.events(run_id, after=after):
            if isinstance(item, StreamEnd):
                break
            view.show(item)
            if item.kind == "ask" and interactive:
                await channel.refresh()
            elif until_asked and item.kind == "ask" and item.payload.get("state") == "asked":
                qid = str(item.payload.get("id") or "")
                if any(q.id == qid for q in await api.questions(run_id)):
                    break
    except asyncio.CancelledError:
        if console is not None and console.quitting:
            task = asyncio.current_task()
            if task is not None:
                task.uncancel()  # the cancel was ours (the second Ctrl-C): following ends, the caller goes on
            screen.say(t("remote.stopped_following", run=run_id))
            return await api.run(run_id)
        raise
    finally:
        if console is not None:
            console.stop()
            try:
                loop.remove_signal_handler(signal.SIGINT)
            except (NotImplementedError, RuntimeError, ValueError):
                pass
    return await api.run(run_id)
