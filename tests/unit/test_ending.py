"""``ending.decide``: every way a run can end, one row each — no disk, no backend, no clock."""

from __future__ import annotations

import pytest

from sandbox.records import ExitRecord
from service.control.ending import Drained, Ended, claimed_cost, decide

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
