"""Which replica follows each live run (``leases``): a lease per run, its generation the fencing token that every
write of the run carries (``RunsTable.under``)."""

from __future__ import annotations

import functools

import msgspec
from sqlalchemy import Float, Text, bindparam, delete, or_, select, update
from sqlalchemy.sql.dml import UpdateBase

from . import dialects
from .db import Database
from .rows import ACTIVE, Lease, plain
from .tables import leases, runs

__all__ = ["LeasesTable"]


class LeasesTable:
    def __init__(self, db: Database) -> None:
        self._db = db

    def take(self, run_id: str, owner: str, *, ttl: float, now: float) -> Lease | None:
        """Hold ``run_id`` for ``owner`` until ``now + ttl``: when no one holds it, its lease has expired, or
        ``owner`` holds it already (a replica started again under its name). The generation goes up either way —
        whatever held it before writes nothing more. None when another replica holds it still."""
        with self._db.statement() as t:
            row = t.execute(_take(self._db.dialect), {"run_id": run_id, "owner": owner, "now": now,
                                                  "expires": now + ttl}).mappings().first()
        return msgspec.convert(plain(row), Lease) if row is not None else None

    def renew(self, owner: str, *, ttl: float, now: float) -> dict[str, Lease]:
        """Every lease ``owner`` still holds, moved on to ``now + ttl`` — a run missing here is another's now. One
        that ran out while renewals failed (a full disk, the database away) and that no one took since is still
        its own."""
        q = (update(leases).where(leases.c.owner == owner)
             .values(expires=now + ttl).returning(*leases.c))
        with self._db.statement() as t:
            rows = t.execute(q).mappings().all()
        return {str(r["run_id"]): msgspec.convert(plain(r), Lease) for r in rows}

    def unheld(self, *, now: float) -> tuple[str, ...]:
        """The live runs no replica holds: never taken, or their lease expired (their replica stopped renewing) —
        and the parked ones whose parking a replica left half done (their sandbox or token not yet let go)."""
        held = select(leases.c.run_id).where(leases.c.expires >= now)
        unsettled = (runs.c.status == "parked") & (runs.c.handle.is_not(None) | runs.c.token_sha256.is_not(None))
        q = (select(runs.c.id).where(runs.c.status.in_(ACTIVE) | unsettled, runs.c.id.not_in(held))
             .order_by(runs.c.created))
        return tuple(str(r["id"]) for r in self._db.rows(q))

    def release(self, lease: Lease) -> None:
        """Let go of a run (it ended, or went back in line) — only the lease given: a newer one stays."""
        with self._db.statement() as t:
            t.execute(delete(leases).where(leases.c.run_id == lease.run_id, leases.c.owner == lease.owner,
                                           leases.c.generation == lease.generation))


@functools.cache
def _take(dialect: dialects.Dialect) -> UpdateBase:
    """``LeasesTable.take``'s statement, built once (bound: run_id, owner, now, expires)."""
    owner, expires = bindparam("owner", type_=Text()), bindparam("expires", type_=Float())
    new = dialects.insert(leases, dialect).values(run_id=bindparam("run_id"), owner=owner, generation=1,
                                                  expires=expires)
    return new.on_conflict_do_update(
        index_elements=[leases.c.run_id], set_={"owner": owner, "generation": leases.c.generation + 1,
                                                "expires": expires},
        where=or_(leases.c.expires < bindparam("now"), leases.c.owner == owner)).returning(*leases.c)
