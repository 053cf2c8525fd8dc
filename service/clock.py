"""The one clock the service reads: wall seconds (what rows, days and retries are stamped with) and monotonic seconds
(how long something took, when to look again).

Every collaborator that needs the time is handed a ``Clock`` (``SystemClock`` in the service), never calls ``time``
itself: a test hands it a ``ManualClock`` and moves time on (a lease past its ttl, a day past UTC midnight, a
webhook's next try) without sleeping. ``time.sleep``/``asyncio.sleep`` are not the clock: waiting stays real.
"""

from __future__ import annotations

import time
from typing import Protocol, runtime_checkable

__all__ = ["Clock", "SystemClock", "ManualClock", "SYSTEM"]


@runtime_checkable
class Clock(Protocol):
    """Checkable at run time: the API's handlers are given one, and Litestar checks what it gives."""

    def now(self) -> float:
        """Wall time, seconds since the epoch (UTC)."""
        ...

    def monotonic(self) -> float:
        """Seconds on a clock that never goes back: only differences mean anything."""
        ...


class SystemClock:
    """The machine's clocks."""

    def now(self) -> float:
        return time.time()

    def monotonic(self) -> float:
        return time.monotonic()


SYSTEM: Clock = SystemClock()
"""The default of a constructor's ``clock``: the machine's (it holds no state, one is enough)."""


class ManualClock:
    """A clock that moves only when told (``advance``, ``set``): both readings move together."""

    def __init__(self, now: float = 1_700_000_000.0) -> None:
        self._now = now
        self._monotonic = 1_000.0

    def now(self) -> float:
        return self._now

    def monotonic(self) -> float:
        return self._monotonic

    def advance(self, seconds: float) -> None:
        if seconds < 0:
            raise ValueError(f"a clock moves forward only: advance by {seconds} s is negative, set() a time instead")
        self._now += seconds
        self._monotonic += seconds

    def set(self, now: float) -> None:
        """The wall time jumps to ``now`` (as an NTP step would); the monotonic clock does not move."""
        self._now = now
