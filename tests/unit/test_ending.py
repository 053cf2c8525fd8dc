"""``ending.decide``: every way a run can end, one row each — no disk, no backend, no clock."""

from __future__ import annotations

import pytest

from sandbox.records import ExitRecord
from service.control.ending import Drained, Ended, claimed_cost, decide, give_up, losses_text, lost
from service.registry import Loss

OK = ExitRecord(status="succeeded", cost_usd=0.5)
FULL = ExitRecord(status="failed", error="OSError: [Errno 28] No space left on device")

CASES: list[tuple[str, Drained, Ended]] = [
    ("its exit.json says it succeeded",
     Drained(stops={}, cancel_requested=False, exit=OK, claimed_cost_usd=0.1),
     Ended("succeeded", None, None, 0.5)),
    ("its exit.json says it failed: the reason is its status",
     Drained(stops={}, cancel_requested=False, exit=ExitRecord(status="aborted", error="gave up")),
     Ended("aborted", "gave up", "aborted", 0.0)),
    ("a failure for want of space is marked so",
     Drained(stops={}, cancel_requested=False, exit=FULL),
     Ended("failed", FULL.error, "failed", 0.0, disk_full=True)),
    ("over budget wins over what the run says of itself",
     Drained(stops={"budget": "over budget: …"}, cancel_requested=True, exit=OK),
     Ended("failed", "over budget: …", "budget", 0.5)),
    ("stopped for two reasons: the budget is named before the disk",
     Drained(stops={"disk": "too big", "budget": "too dear"}, cancel_requested=False, exit=None),
     Ended("failed", "too dear", "budget", 0.0)),
    ("its tenant removed is named before its disk",
     Drained(stops={"disk": "too big", "tenant_removed": "gone"}, cancel_requested=False, exit=None),
     Ended("failed", "gone", "tenant_removed", 0.0)),
    ("over its disk",
     Drained(stops={"disk": "too big"}, cancel_requested=False, exit=None),
     Ended("failed", "too big", "disk", 0.0)),
    ("cancelled on request, whatever its exit.json says",
     Drained(stops={}, cancel_requested=True, exit=ExitRecord(status="killed")),
     Ended("cancelled", "cancelled on request", None, 0.0)),
    ("an exit.json that is not a record",
     Drained(stops={}, cancel_requested=False, exit=None, bad_exit="exit.json is not a record"),
     Ended("failed", "exit.json is not a record", "failed", 0.0)),
    ("its sandbox gone without exit.json",
     Drained(stops={}, cancel_requested=False, exit=None, missing=True),
     Ended("failed", "the run's sandbox disappeared without writing exit.json", "vanished", 0.0)),
    ("its sandbox gone, with the restart's sentence",
     Drained(stops={}, cancel_requested=False, exit=None, missing=True, why_missing="the service restarted …"),
     Ended("failed", "the service restarted …", "vanished", 0.0)),
    ("exited without exit.json: a crash, with its code",
     Drained(stops={}, cancel_requested=False, exit=None, exit_code=137, claimed_cost_usd=0.2),
     Ended("failed", "the run exited with code 137 without writing exit.json (it crashed before finishing)",
           "crashed", 0.2)),
    ("a crash while the disk was full is marked so",
     Drained(stops={}, cancel_requested=False, exit=None, disk_was_full=True),
     Ended("failed", "the run exited with code None without writing exit.json (it crashed before finishing)",
           "crashed", 0.0, disk_full=True)),
    ("a cost of 0 in exit.json keeps what its events claimed",
     Drained(stops={}, cancel_requested=False, exit=ExitRecord(status="succeeded"), claimed_cost_usd=0.3),
     Ended("succeeded", None, None, 0.3)),
]


@pytest.mark.parametrize("drained, ended", [(d, e) for _, d, e in CASES], ids=[name for name, _, _ in CASES])
def test_decide_names_the_one_way_a_run_ended(drained: Drained, ended: Ended) -> None:
    assert decide(drained) == ended


@pytest.mark.parametrize("claim, believed", [(0.25, 0.25), ("0.5", 0.5), (float("nan"), 7.0), (float("inf"), 7.0),
                                             (-1, 7.0), (1e12, 7.0), (None, 7.0), ([1], 7.0), ("lots", 7.0)])
def test_a_cost_the_run_claims_is_believed_only_when_finite_and_sane(claim: object, believed: float) -> None:
    assert claimed_cost(claim, 7.0) == believed


LOSSES: list[tuple[str, Drained, str | None]] = [
    ("exited without exit.json: crashed (SIGKILL, out of memory)",
     Drained(stops={}, cancel_requested=False, exit=None, exit_code=137), "crashed"),
    ("gone: vanished (its container or pod removed)",
     Drained(stops={}, cancel_requested=False, exit=None, missing=True), "vanished"),
    ("its exit.json says killed and the service stopped nothing: its engine or node stopped it",
     Drained(stops={}, cancel_requested=False, exit=ExitRecord(status="killed", error="stopped by SIGTERM")), "killed"),
    ("killed by the service's own stop (its budget): its end, not a loss",
     Drained(stops={"budget": "too dear"}, cancel_requested=False, exit=ExitRecord(status="killed")), None),
    ("cancelled: its end", Drained(stops={}, cancel_requested=True, exit=None, missing=True), None),
    ("it ended by itself", Drained(stops={}, cancel_requested=False, exit=OK), None),
    ("a bad exit.json is the run's doing, not a loss",
     Drained(stops={}, cancel_requested=False, exit=None, bad_exit="not a record"), None),
    ("died for want of disk: a resume would die the same way",
     Drained(stops={}, cancel_requested=False, exit=None, exit_code=1, disk_was_full=True), None),
]


@pytest.mark.parametrize("drained,cause", [c[1:] for c in LOSSES], ids=[c[0] for c in LOSSES])
def test_a_lost_sandbox_is_told_from_a_run_that_ended(drained: Drained, cause: str | None) -> None:
    assert lost(drained, decide(drained)) == cause


def _loss(place: str = "model call", progressed: bool = True, step: str = "工作") -> Loss:
    return Loss(cause="crashed", at=1.0, error="exited with code 137", step=step, place=place, progressed=progressed)


def test_a_run_is_resumed_up_to_max_resumes_and_not_when_lost_twice_at_one_place_having_done_nothing() -> None:
    assert give_up([_loss()] * 3, 3) is None
    assert "lost 4 times, more than max_resumes = 3" in (give_up([_loss()] * 4, 3) or "")
    assert give_up([_loss()], 0) is not None, "max_resumes = 0: never resumed"
    bash = "tool Bash: npm test"
    assert "twice in a row the same way" in (give_up([_loss(bash), _loss(bash)], 3) or ""), \
        "the same command of its own brought its sandbox down twice (out of memory, a fork flood): not a third time"
    ask = "tool mcp__human__ask: 用什么语言?"
    assert give_up([_loss(ask), _loss(ask, progressed=True)], 3) is None, "waiting on a person twice is no fault of its"
    assert "twice in a row" in (give_up([_loss(ask), _loss(ask, progressed=False)], 3) or ""), "nothing done between"
    assert give_up([_loss("model call"), _loss("model call")], 3) is None, "a model call, got further between"
    assert give_up([_loss(bash), _loss("model call", progressed=False)], 3) is None, "another place"
    assert give_up([_loss(bash), _loss(bash, progressed=False, step="确认需求")], 3) is None, "another step"
    text = losses_text([_loss(), _loss(bash)])
    assert text.startswith("1) crashed — exited with code 137 (step 工作, model call); 2) crashed") and bash in text
