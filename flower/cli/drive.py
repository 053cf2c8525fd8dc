"""Running a workflow in front of a person: the runtime announced on the screen, the console, the signals."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import sys
from typing import TYPE_CHECKING, Any

from .console import Console
from .errors import Exit
from .messages import name, t
from .oracle import aside
from .screen import Screen
from .terminal import isatty, one_line, route_library_logs

if TYPE_CHECKING:
    from ..core.runtime import Runtime


def shown_runtime(screen: Screen, **kw: Any) -> Runtime:
    """A Runtime whose every ``run`` (steps, rounds, verdicts) is announced and summed up on the screen."""
    from ..core.runtime import Runtime

    route_library_logs()
    runtime = Runtime(**kw)
    runtime.on_attempt.append(screen.attempt)
    runtime.on_result.append(lambda r: screen.attempt_done(r, runtime.total_cost()))
    return runtime


def install_signals(loop: asyncio.AbstractEventLoop, runtime: Any, screen: Screen, console: Console | None) -> None:
    """SIGTERM/SIGHUP: the step in flight goes into the manifest, then the default action (the process ends)."""

    def die(sig: signal.Signals) -> None:
        try:
            runtime.rescue()
        finally:
            if console is not None:
                console.stop()
            screen.say(t("drive.signal", sig=sig.name, manifest=runtime.manifest_path), err=True)
            screen.close()
            try:
                loop.remove_signal_handler(sig)
            except (RuntimeError, ValueError):
                pass
            signal.signal(sig, signal.SIG_DFL)
            os.kill(os.getpid(), sig)

    for name in ("SIGTERM", "SIGHUP"):
        sig = getattr(signal, name, None)
        if sig is None:
            continue
        try:
            loop.add_signal_handler(sig, die, sig)
        except (NotImplementedError, RuntimeError, ValueError):
            pass  # not the main thread, or no signals here
    if console is not None and console.tty:
        try:
            loop.add_signal_handler(signal.SIGINT, console.ctrl_c)
        except (NotImplementedError, RuntimeError, ValueError):
            pass


async def drive(wf: Any, runtime: Any, screen: Screen, *, listen: bool, oracle_ctx: dict[str, Any]) -> Any:
    """Run a workflow with the screen, the stdin console, the oracle and the signal handlers around it; a
    guard's denial is said on the screen as the service's stream says it."""
    from ..core import audit

    loop = asyncio.get_running_loop()
    channel = getattr(wf, "channel", None)
    if channel is not None and hasattr(channel, "on_event"):
        previous = channel.on_event

        def both(ev: Any) -> None:
            screen.event(ev)
            if previous is not None:
                previous(ev)

        channel.on_event = both
    console = None
    if listen:
        async def ask_aside(question: str) -> None:
            await aside(question, screen, live=True, **oracle_ctx)

        console = Console(screen, channel, runtime, loop, tty=isatty(sys.stdin) and screen.tty, oracle=ask_aside)
        console.main = asyncio.current_task()
        console.start()
    install_signals(loop, runtime, screen, console)
    try:
        with audit.listen(lambda ev: screen.denied(ev.fields) if ev.kind == "deny" else None):
            return await wf.run(runtime, on_event=screen.event)
    except asyncio.CancelledError:
        if console is not None and console.quitting:
            raise Exit(130, t("drive.quit")) from None
        raise
    finally:
        if console is not None:
            console.stop()
            await console.drain()


def finish(ctx: dict[str, Any], runtime: Any, screen: Screen) -> int:
    """The total; 0 when the workflow got through, else why it stopped, as one line (with a hint for credentials)."""
    screen.say(t("drive.total", cost=runtime.total_cost(), manifest=runtime.manifest_path))
    stopped = ctx.get("_failed_at")  # RunState.failed_at, as mirrored into the context
    if not stopped:
        return 0
    r = (ctx.get("_results") or {}).get(stopped)
    why = ctx.get("_aborted") or (r.error if r is not None and r.error else "") or t("drive.not_passed")
    if re.search(r"\b401\b|invalid.{0,8}(api.?key|token)|authentication|unauthori[sz]ed", str(why), re.I):
        why += t("drive.creds_hint")
    raise Exit(1, t("drive.stopped", step=name(stopped), why=one_line(why, 300)))
