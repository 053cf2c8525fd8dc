"""The tenants' SSE stream slots, counted across replicas (``streams``; ``service.control.streams`` holds them)."""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import delete, select, update

from . import dialects
from .db import Database
from .tables import streams

__all__ = ["StreamsTable"]


class StreamsTable:
    def __init__(self, db: Database) -> None:
        self._db = db

    @property
    def shared(self) -> bool:
        """Several replicas may hold slots here (PostgreSQL); on SQLite there is one."""
        return self._db.dialect == "postgresql"

    def take(self, tenant: str, holder: str, *, replica: str, cap: int, now: float,
                    ttl: float) -> int | None:
        """One of ``tenant``'s ``cap`` stream slots for ``holder`` (a stream of ``replica``'s) until ``now + ttl``,
        or None when every one is held: a free or run-out slot is taken by its primary key, so two replicas never
        both get the same one."""
        for _ in range(3):  # another replica took the slot picked a moment ago: pick again
            held = {int(r["slot"]) for r in self._db.rows(select(streams.c.slot).where(
                streams.c.tenant == tenant, streams.c.slot < cap, streams.c.expires >= now))}
            free = next((i for i in range(cap) if i not in held), None)
            if free is None:
                return None
            new = dialects.insert(streams, self._db.dialect).values(tenant=tenant, slot=free, replica=replica,
                                                                holder=holder, expires=now + ttl)
            q = new.on_conflict_do_update(index_elements=[streams.c.tenant, streams.c.slot],
                                          set_={"replica": replica, "holder": holder, "expires": now + ttl},
                                          where=streams.c.expires < now).returning(streams.c.slot)
            with self._db.statement() as t:
                if t.execute(q).first() is not None:
                    return free
        return None

    def renew(self, holders: Sequence[str], *, now: float, ttl: float) -> None:
        """The slots of the streams still open here, kept until ``now + ttl``."""
        if holders:
            self._db.write(update(streams).where(streams.c.holder.in_(list(holders))).values(expires=now + ttl))

    def release_all(self, replica: str | None) -> int:
        """Every slot ``replica`` held (None: every slot) — it starts again, and its streams died with its last
        self."""
        q = delete(streams)
        return self._db.write(q if replica is None else q.where(streams.c.replica == replica))

    def give_back(self, tenant: str, slot: int, holder: str) -> None:
        """A stream ended: its slot is free (only if still ``holder``'s: one that ran out may be another's now)."""
        self._db.write(delete(streams).where(streams.c.tenant == tenant, streams.c.slot == slot,
                                          streams.c.holder == holder))
