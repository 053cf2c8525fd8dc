"""Item 2, the two pieces on their own: a bounded exponential backoff, and a repeating error logged once with a
count. (The faults in test_disk_full.py and test_engine_away.py check the same bound on the live service.)"""

from __future__ import annotations

import errno
from typing import Any

from service.control.backoff import Backoff, RepeatLog
from service.clock import ManualClock
from service.control.health import is_disk_full


class Lines:
    def __init__(self) -> None:
        self.lines: list[tuple[str, str, dict[str, Any]]] = []

    def __getattr__(self, level: str) -> Any:
        return lambda event, **kw: self.lines.append((level, event, kw))


def test_the_backoff_doubles_up_to_its_cap_and_a_success_resets_it():
    clock = ManualClock()
    b = Backoff(base=0.5, cap=30, clock=clock)
    waits = [b.failed("run") for _ in range(10)]
    assert waits == [0.5, 1, 2, 4, 8, 16, 30, 30, 30, 30]
    assert not b.ready("run") and b.ready("other")
    clock.advance(30)
    assert b.ready("run")
    assert b.succeeded("run") == 10 and b.failed("run") == 0.5
    b.reset()
    assert b.ready("run") and b.failures("run") == 1


def test_an_error_repeating_for_ten_minutes_is_a_handful_of_lines():
    clock, out = ManualClock(), Lines()
    errors = RepeatLog(out, summary_s=60, clock=clock)
    full = OSError(errno.ENOSPC, "No space left on device")
    passes = 0
    for _ in range(2400):  # ten minutes of passes every 0.25 s, twenty runs meeting the same full disk
        for run in range(20):
            errors.error("scheduler.follow_failed", f"run-{run}", full, run=f"run-{run}")
            passes += 1
        clock.advance(0.25)
    for run in range(20):
        errors.ok(f"run-{run}")
    events = [e for _, e, _ in out.lines]
    assert events[0] == "scheduler.follow_failed" and "exc_info" in out.lines[0][2]
    assert events.count("scheduler.follow_failed") == 1, "the traceback once"
    assert 9 <= events.count("scheduler.follow_failed.repeated") <= 10, "then a summary a minute"
    assert events[-1] == "scheduler.follow_failed.recovered" and out.lines[-1][2]["repeated"] == passes
    assert len(events) <= 12
    assert is_disk_full(full) and errors.failing() == {}


def test_a_different_error_starts_a_new_streak():
    clock, out = ManualClock(), Lines()
    errors = RepeatLog(out, clock=clock)
    errors.error("scheduler.tick_failed", "tick", RuntimeError("one"))
    errors.error("scheduler.tick_failed", "tick", RuntimeError("one"))
    errors.error("scheduler.tick_failed", "tick", RuntimeError("two"))
    assert [e for _, e, _ in out.lines] == ["scheduler.tick_failed", "scheduler.tick_failed.repeated",
                                            "scheduler.tick_failed"]


def test_an_error_that_flaps_is_one_traceback_until_it_stays_away():
    """A pass that wrote nothing succeeds between two that fail on the full disk: the same streak, one traceback;
    back after a quiet minute, it is a new one."""
    clock, out = ManualClock(), Lines()
    errors = RepeatLog(out, summary_s=60, clock=clock)
    full = OSError(errno.ENOSPC, "No space left on device")
    for _ in range(5):
        errors.error("scheduler.follow_failed", "run-1", full)
        clock.advance(0.25)
        errors.ok("run-1")
        clock.advance(0.25)
    tracebacks = [kw for _, e, kw in out.lines if e == "scheduler.follow_failed" and "exc_info" in kw]
    assert len(tracebacks) == 1, out.lines
    clock.advance(61)
    errors.error("scheduler.follow_failed", "run-1", full)
    assert len([kw for _, e, kw in out.lines if e == "scheduler.follow_failed" and "exc_info" in kw]) == 2
