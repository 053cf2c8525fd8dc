"""The gateway's audit of each run (``wire_audit``): the counts the run cannot touch, and when its first model
request came — written by the gateway's process, read by the scheduler and the warm pool."""

from __future__ import annotations

from collections import Counter

from sqlalchemy import func, select

from . import dialects
from .db import Database
from .tables import wire_audit

__all__ = ["WireAuditTable"]


class WireAuditTable:
    def __init__(self, db: Database) -> None:
        self._db = db

    def record(self, run_id: str, counts: Counter[str]) -> None:
        """The gateway's audit counts of a run as they stand (its process writes them; the scheduler compares them
        with the run's own at the end)."""
        q = dialects.insert(wire_audit, self._db.dialect).values(
            run=run_id, tool_calls=counts["tool_call"], denials=counts["deny"], spills=counts["spill"])
        self._db.write(q.on_conflict_do_update(index_elements=[wire_audit.c.run], set_={
            "tool_calls": q.excluded.tool_calls, "denials": q.excluded.denials, "spills": q.excluded.spills}))

    def record_first_request(self, run_id: str, at: float) -> None:
        """When the gateway saw the run's first model request (a gateway started again later keeps the first)."""
        q = dialects.insert(wire_audit, self._db.dialect).values(run=run_id, first_request=at)
        self._db.write(q.on_conflict_do_update(index_elements=[wire_audit.c.run], set_={
            "first_request": func.coalesce(wire_audit.c.first_request, q.excluded.first_request)}))

    def first_request(self, run_id: str) -> float | None:
        """What ``record_first_request`` kept, or None."""
        rows = self._db.rows(select(wire_audit.c.first_request).where(wire_audit.c.run == run_id))
        return float(rows[0]["first_request"]) if rows and rows[0]["first_request"] is not None else None

    def counts(self, run_id: str) -> Counter[str] | None:
        """What ``record`` last wrote for the run, or None when the gateway counted nothing of it."""
        rows = self._db.rows(select(wire_audit).where(wire_audit.c.run == run_id))
        if not rows:
            return None
        r = rows[0]
        return Counter({"tool_call": int(r["tool_calls"]), "deny": int(r["denials"]), "spill": int(r["spills"])})
