"""What the feed believes of a run's open questions (its ``ask`` events, claims): bounded, ours by name."""

from __future__ import annotations

from sandbox.records import Event
from service.control.feed import ASKING_MAX, _asking
from service.control.live import LiveRun


def test_a_run_claiming_endless_open_questions_holds_the_service_a_bounded_set() -> None:
    live = LiveRun("r")
    for i in range(ASKING_MAX * 50):
        _asking(Event(kind="ask", payload={"id": f"q{i}", "state": "asked"}), live)
    assert len(live.asking) == ASKING_MAX
    _asking(Event(kind="ask", payload={"id": "../../etc/x", "state": "asked"}), live)
    _asking(Event(kind="ask", payload={"id": "q0", "state": "answered"}), live)
    assert "../../etc/x" not in live.asking and "q0" not in live.asking and len(live.asking) == ASKING_MAX - 1
