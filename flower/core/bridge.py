"""The thread ↔ event-loop bridge: wake a waiter, or run a call, on its loop from any thread."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TypeVar

__all__ = ["wake", "on_loop", "call_soon"]

T = TypeVar("T")


def on_loop(loop: asyncio.AbstractEventLoop) -> bool:
    """Whether the calling thread is running ``loop`` right now."""
    try:
        return asyncio.get_running_loop() is loop
    except RuntimeError:  # no loop runs in this thread
        return False


def wake(fut: asyncio.Future[None]) -> None:
    """Resolve a future from its own loop's thread or any other; a closed loop has nobody to wake."""
    def set_() -> None:
        if not fut.done():
            fut.set_result(None)

    loop = fut.get_loop()
    if on_loop(loop):
        set_()
    elif not loop.is_closed():
        try:
            loop.call_soon_threadsafe(set_)
        except RuntimeError:  # the loop closed between the check and the call
            pass


def call_soon(loop: asyncio.AbstractEventLoop | None, fn: Callable[[T], None], arg: T) -> None:
    """``fn(arg)`` on ``loop`` when called from another thread while it runs, else right here."""
    if loop is not None and loop.is_running() and not loop.is_closed() and not on_loop(loop):
        try:
            loop.call_soon_threadsafe(fn, arg)
            return
        except RuntimeError:  # the loop closed meanwhile: run it here instead
            pass
    fn(arg)
