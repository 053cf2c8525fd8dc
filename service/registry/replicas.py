"""Replica names (``replicas``): one live process per ``replica`` name, held by a heartbeat."""

from __future__ import annotations

import msgspec
from sqlalchemy import delete, or_, select, update

from . import dialects
from .db import Database
from .rows import Replica, plain
from .tables import replicas

__all__ = ["ReplicasTable"]


class ReplicasTable:
    def __init__(self, db: Database) -> None:
        self._db = db

    def claim(self, name: str, instance: str, process: str, *, ttl: float, now: float,
                   over: str | None = None) -> Replica:
        """Hold ``name`` for ``instance`` until ``now + ttl``: when no one holds it, its holder's heartbeat ran out,
        ``instance`` holds it already, or ``over`` does (a holder known to be gone). The row as it stands after:
        ``instance``'s when claimed, else the live holder's."""
        new = dialects.insert(replicas, self._db.dialect).values(name=name, instance=instance, process=process,
                                                             heartbeat=now, expires=now + ttl)
        taken = or_(replicas.c.expires < now, replicas.c.instance == instance,
                    *([replicas.c.instance == over] if over is not None else []))
        q = new.on_conflict_do_update(index_elements=[replicas.c.name],
                                      set_={"instance": instance, "process": process, "heartbeat": now,
                                            "expires": now + ttl}, where=taken).returning(*replicas.c)
        with self._db.statement() as t:
            row = t.execute(q).mappings().first()
        if row is None:
            row = self._db.rows(select(replicas).where(replicas.c.name == name))[0]
        return msgspec.convert(plain(row), Replica)

    def beat(self, name: str, instance: str, *, ttl: float, now: float) -> bool:
        """``instance``'s heartbeat under ``name``, moved on to ``now + ttl``; False when another instance holds
        the name now (this one's heartbeat ran out and another process claimed it)."""
        return self._db.write(update(replicas).where(replicas.c.name == name, replicas.c.instance == instance)
                           .values(heartbeat=now, expires=now + ttl)) == 1

    def release(self, name: str, instance: str) -> None:
        """A graceful stop: the name is free at once (only if still ``instance``'s)."""
        self._db.write(delete(replicas).where(replicas.c.name == name, replicas.c.instance == instance))
