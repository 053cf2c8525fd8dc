"""Failing paths that neither spin nor flood: a bounded exponential backoff, and an error logged once with a count.

A scheduler pass that fails (a full disk, an engine that went away, a registry that cannot write) will fail
again on the next pass. Retrying every ``poll_s`` with a traceback each time turned one full disk into
~37 log lines a second. So every failure path waits ``base · 2^(n-1)`` (at most ``cap``) before trying again,
and a repeating error is logged in full the first time, then once a ``summary_s`` with how often it happened,
and once more when it stops ("recovered", with the count and how long it lasted).
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import Any

from ..clock import SYSTEM, Clock

__all__ = ["Backoff", "RepeatLog"]

class Backoff:
    """Per key: after the n-th failure in a row, ``ready`` is False for ``min(cap, base · 2^(n-1))`` seconds."""

    def __init__(self, base: float = 0.5, cap: float = 30.0, *, clock: Clock = SYSTEM) -> None:
        self.base, self.cap, self._clock = base, cap, clock
        self._fails: dict[Hashable, int] = {}
        self._until: dict[Hashable, float] = {}

    def ready(self, key: Hashable) -> bool:
        return self._clock.monotonic() >= self._until.get(key, 0.0)

    def delay(self, key: Hashable) -> float:
        """Seconds until ``key`` may be tried again (0 when it may now)."""
        return max(0.0, self._until.get(key, 0.0) - self._clock.monotonic())

    def failed(self, key: Hashable) -> float:
        """Record one more failure; the wait before the next try."""
        n = self._fails.get(key, 0) + 1
        self._fails[key] = n
        wait = float(min(self.cap, self.base * 2 ** min(n - 1, 30)))
        self._until[key] = self._clock.monotonic() + wait
        return wait

    def succeeded(self, key: Hashable) -> int:
        """Reset ``key``; how many failures in a row it had."""
        self._until.pop(key, None)
        return self._fails.pop(key, 0)

    def reset(self) -> None:
        """Every key may be tried at once (the fault they waited on is gone), their counts kept."""
        self._until.clear()

    def failures(self, key: Hashable) -> int:
        return self._fails.get(key, 0)


@dataclass
class _Streak:
    signature: str
    first: float
    last_logged: float
    count: int = 1
    since_logged: int = 0
    keys: set[Hashable] = field(default_factory=set)


class RepeatLog:
    """Errors grouped by (event, signature): the first logged with its traceback, repeats counted.

    ``signature`` is what makes two failures "the same error" (its type and message, without run ids), so a full
    disk that fails twenty runs' writes is one streak, not twenty. ``key`` (a run id, "tick", …) says who met it;
    the streak ends when every key that met it has succeeded again. The same error back within ``summary_s`` of
    its recovery (a failure that flaps: a pass that wrote nothing succeeded in between) resumes counting without a
    second traceback."""

    def __init__(self, logger: Any, *, summary_s: float = 60.0, clock: Clock = SYSTEM) -> None:
        self.log, self.summary_s, self._clock = logger, summary_s, clock
        self._streaks: dict[str, _Streak] = {}  # event → current streak
        self._key_event: dict[Hashable, str] = {}
        self._recovered: dict[str, tuple[str, float]] = {}  # event → (signature, when) of its last recovery

    def error(self, event: str, key: Hashable, error: BaseException, **fields: Any) -> None:
        now = self._clock.monotonic()
        signature = f"{type(error).__name__}: {' '.join(str(error).split())[:300]}"
        streak = self._streaks.get(event)
        if streak is None or streak.signature != signature:
            if streak is not None:
                self._summary(event, streak, now, changed=True)
            self._streaks[event] = _Streak(signature, now, now, keys={key})
            self._key_event[key] = event
            last = self._recovered.get(event)
            if last is not None and last[0] == signature and now - last[1] < self.summary_s:
                self._streaks[event].since_logged = 1  # back again: counted, told in the next summary
                return
            self.log.error(event, error=signature, exc_info=error, **fields)
            return
        streak.count += 1
        streak.since_logged += 1
        streak.keys.add(key)
        self._key_event[key] = event
        if now - streak.last_logged >= self.summary_s:
            self._summary(event, streak, now)

    def ok(self, key: Hashable) -> None:
        """``key`` works again; when nobody is left meeting the error, say it recovered."""
        event = self._key_event.pop(key, None)
        if event is None:
            return
        streak = self._streaks.get(event)
        if streak is None:
            return
        streak.keys.discard(key)
        if not streak.keys:
            del self._streaks[event]
            self._recovered[event] = (streak.signature, self._clock.monotonic())
            self.log.info(f"{event}.recovered", error=streak.signature, repeated=streak.count,
                          lasted_s=round(self._clock.monotonic() - streak.first, 1))

    def failing(self) -> dict[str, int]:
        """event → how many times its current error happened."""
        return {event: s.count for event, s in self._streaks.items()}

    def _summary(self, event: str, streak: _Streak, now: float, *, changed: bool = False) -> None:
        if streak.since_logged:
            self.log.warning(f"{event}.repeated", error=streak.signature, repeated=streak.count,
                             since_last=streak.since_logged, runs=len(streak.keys),
                             lasted_s=round(now - streak.first, 1), changed=changed or None)
        streak.last_logged, streak.since_logged = now, 0
