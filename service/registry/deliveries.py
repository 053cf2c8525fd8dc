"""Webhook deliveries (``deliveries``; ``service.results.webhooks`` sends them): each signed body as first built, and how
its tries went. A try is claimed before it is sent and its outcome stored only while the claim is still its own."""

from __future__ import annotations

import msgspec
from sqlalchemy import ColumnElement, select, update

from . import dialects
from .db import Database
from .rows import Delivery, DeliveryState, ordered, plain
from .tables import deliveries

__all__ = ["DeliveriesTable"]


class DeliveriesTable:
    def __init__(self, db: Database) -> None:
        self._db = db
        self._order = dialects.insertion_order(deliveries, db.dialect)

    def add(self, d: Delivery) -> bool:
        """Queue one delivery; False when one of that id is there already (an event read twice is sent once)."""
        q = dialects.insert(deliveries, self._db.dialect).values(
            id=d.id, tenant=d.tenant, run=d.run, event=d.event, body=d.body, created=d.created, state=d.state,
            next_try=d.next_try).on_conflict_do_nothing(index_elements=[deliveries.c.id]).returning(deliveries.c.id)
        with self._db.statement() as t:  # RETURNING: SQLAlchemy's psycopg rowcount is -1 for an INSERT … ON CONFLICT
            return t.execute(q).first() is not None

    def list(self, *, tenant: str | None = None, state: DeliveryState | None = None,
                   limit: int | None = None, oldest_first: bool = False) -> list[Delivery]:
        where: list[ColumnElement[bool]] = []
        if tenant is not None:
            where.append(deliveries.c.tenant == tenant)
        if state is not None:
            where.append(deliveries.c.state == state)
        q = ordered(select(deliveries).where(*where), self._order, oldest_first, limit)
        return [msgspec.convert({**plain(r), "body": bytes(r["body"])}, Delivery) for r in self._db.rows(q)]

    def claim(self, d: Delivery, *, now: float, until: float) -> bool:
        """Take ``d`` to send one try of it, as read: still pending, due (``next_try <= now``), and tried as often as
        ``d`` says — its next try moved to ``until`` meanwhile, so no other replica sends it until then (one that
        dies while sending leaves it due again at ``until``). ``until`` is the claim: ``tried`` stores the
        try's outcome only while it is still the delivery's. False when another took it first or it is not due."""
        c = deliveries.c
        return self._db.write(update(deliveries).where(
            c.id == d.id, c.state == "pending", c.attempts == d.attempts, c.next_try <= now).values(next_try=until)) > 0

    def tried(self, d: Delivery, *, claim: float) -> bool:
        """Store how a try went (``d`` as it left it, this try counted in ``attempts``): its state, attempts, last
        status and error, next try, end — only while the try's claim (the ``until`` it was claimed with) is still
        the delivery's. False, and nothing written, when it is not: the sender stalled past its claim, and another
        replica has claimed the delivery since (its outcome is that one's to store)."""
        c = deliveries.c
        return self._db.write(update(deliveries).where(
            c.id == d.id, c.state == "pending", c.attempts == d.attempts - 1, c.next_try == claim).values(
            state=d.state, attempts=d.attempts, last_status=d.last_status, last_error=d.last_error,
            next_try=d.next_try, ended=d.ended)) > 0
