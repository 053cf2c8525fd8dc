"""The database object every table shares (``Database``): a replica listening is woken when another queues or ends a
run (PostgreSQL's LISTEN/NOTIFY; nothing on SQLite, one replica)."""

from __future__ import annotations

import threading
from pathlib import Path

from service.registry import Registry

from _tables import ACME


def test_a_replica_listening_is_woken_when_another_queues_or_ends_a_run(registry: Registry, tmp_path: Path):
    """PostgreSQL: LISTEN/NOTIFY — no replica waits for its next poll. SQLite: one replica, nothing to hear."""
    woken = threading.Event()
    stop = registry.listen(woken.set)
    try:
        if registry.dialect != "postgresql":
            registry.runs.create(id=ACME[0], tenant="acme", ask="a", options={}, repo="")
            assert not woken.wait(0.5)
            return
        assert woken.wait(5), "told once listening (what came before it was not heard)"
        woken.clear()
        other = Registry.postgres(str(registry.db.engine.url.render_as_string(hide_password=False)))
        try:
            other.runs.create(id=ACME[0], tenant="acme", ask="a", options={}, repo="")
            assert woken.wait(5), "a run queued by another replica"
            woken.clear()
            assert other.runs.begin(ACME[0], started=1.0)
            assert woken.wait(5), "a run begun by another replica (a slot taken)"
            woken.clear()
            assert other.runs.record_progress(ACME[0], event_offset=1, event_seq=1, claimed_cost_usd=0, step=None)
            assert not woken.wait(1), "progress changes no status: nobody is woken for it"
            assert other.runs.cancel(ACME[0], at=1.0)
            assert woken.wait(5), "a run cancelled by another replica"
        finally:
            other.close()
    finally:
        stop()
