"""The gateway's audit table (``WireAuditTable``) and what is read through it: the live runs that have sent no model
request yet."""

from __future__ import annotations

from collections import Counter

from service.registry import Registry

from _tables import ACME


def test_booting_counts_the_live_runs_started_since_that_have_sent_no_model_request(registry: Registry):
    """What a warm pool's refill yields to: runs whose sandboxes are starting (``service/control/warm.py``)."""
    for run_id in ACME[:4]:
        registry.runs.create(id=run_id, tenant="acme", ask="x", options={}, repo="/r")
    assert registry.runs.booting(since=0.0) == 0, "queued runs are not starting"
    registry.runs.begin(ACME[0], started=100.0)
    registry.runs.begin(ACME[1], started=100.0)
    registry.runs.begin(ACME[2], started=10.0)  # started long ago and still silent: stuck, not starting
    assert registry.runs.booting(since=50.0) == 2
    registry.wire_audit.record_first_request(ACME[0], 101.0)
    assert registry.runs.booting(since=50.0) == 1
    registry.wire_audit.record(ACME[1], Counter())  # counts, but no request yet
    assert registry.runs.booting(since=50.0) == 1
    assert registry.runs.transition(ACME[1], "failed", frm=["starting", "running"])
    assert registry.runs.booting(since=50.0) == 0 and registry.runs.booting(since=0.0) == 1
