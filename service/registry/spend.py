"""Money: each tenant's spend per day (``spend``) and the holds of the calls in flight (``holds``) — what the
gateway measures on the wire and what it admits a call against. A hold is the most a model call can cost, taken
before the call under the tenant's day row's lock, so gateways in several processes admit one call at a time and no
budget is ever passed; settled by the answer's measured usage, in one transaction."""

from __future__ import annotations

import functools
from dataclasses import dataclass

from sqlalchemy import ColumnElement, Float, Select, Text, bindparam, delete, func, select, update
from sqlalchemy.sql.dml import UpdateBase

from . import dialects
from .db import Database
from .rows import Spent, Standing
from .tables import fires, holds, runs, spend

__all__ = ["SpendTable"]


class SpendTable:
    """The money tables; nothing here moves a run's status."""

    def __init__(self, db: Database) -> None:
        self._db = db

    def add_usage(self, run_id: str, tenant: str, day: str, *, input_tokens: int, output_tokens: int,
                  cache_write_tokens: int, cache_read_tokens: int, cost_usd: float, hold: str | None = None) -> Spent:
        """What the gateway measured for one answer: onto the tenant's day and the run, and the call's ``hold`` let
        go, in one transaction (the money is never counted twice, nor for a moment not at all). The day's row is
        written first, as ``hold`` does: the two take their locks in one order."""
        sql = _money(self._db.dialect)
        with self._db.transaction() as t:
            day_spent = float(t.execute(sql.onto_day, {
                "tenant": tenant, "day": day, "cost": cost_usd, "tin": input_tokens, "tout": output_tokens,
            }).scalar_one())
            run_spent = t.execute(sql.onto_run, {
                "run": run_id, "cost": cost_usd, "tin": input_tokens, "tout": output_tokens,
                "tcw": cache_write_tokens, "tcr": cache_read_tokens}).scalar()
            if hold is not None:
                t.execute(sql.drop_hold, {"hold": hold})
        return Spent(run=float(run_spent or 0.0), day=day_spent)

    def hold(self, hold_id: str, *, run_id: str, tenant: str, day: str, amount: float, owner: str, now: float,
             ttl: float, run_cap: float | None, day_cap: float | None) -> Standing | None:
        """Hold ``amount`` (the most a model call can cost) for the run on ``day`` when the run's spent and held
        with ``amount`` added stay within ``run_cap``, and its tenant's day's within ``day_cap``: checked and written
        in one transaction that first locks the tenant's day row, so gateways in several processes — or on several
        machines — admit one call at a time and no budget is ever passed. A hold no one settles stops counting at
        ``now + ttl`` (its gateway died with the call in flight). None when the run has no row."""
        sql = _money(self._db.dialect)
        with self._db.transaction() as t:
            day_spent = float(t.execute(sql.touch_day, {"tenant": tenant, "day": day}).scalar_one())  # the lock
            run_spent = t.execute(sql.touch_run, {"run": run_id}).scalar()
            if run_spent is None:
                return None
            t.execute(sql.sweep, {"tenant": tenant, "now": now})
            run_held, day_held = (float(x) for x in t.execute(sql.sums, {"run": run_id, "day": day,
                                                                        "tenant": tenant, "now": now}).one())
            taken = ((run_cap is None or run_spent + run_held + amount <= run_cap)
                     and (day_cap is None or day_spent + day_held + amount <= day_cap))
            if taken:
                t.execute(sql.add_hold, {"id": hold_id, "run": run_id, "tenant": tenant, "day": day,
                                         "amount": amount, "owner": owner, "expires": now + ttl})
        return Standing(run_spent=float(run_spent), run_held=run_held, day_spent=day_spent, day_held=day_held,
                        taken=taken)

    def release_hold(self, hold_id: str) -> None:
        """A call that was let through but brought back no answer to meter (the upstream failed): its hold goes."""
        self._db.write(delete(holds).where(holds.c.id == hold_id))

    def renew_holds(self, owner: str, *, now: float, ttl: float) -> int:
        """``owner``'s holds kept until ``now + ttl``: a call in flight longer than a hold's ttl still counts."""
        return self._db.write(update(holds).where(holds.c.owner == owner).values(expires=now + ttl))

    def release_holds(self, owner: str) -> int:
        """Every hold ``owner`` took: a gateway started again under that name lets go of its dead self's calls."""
        return self._db.write(delete(holds).where(holds.c.owner == owner))

    def run_budget(self, run_id: str) -> float | None:
        """The run's own budget: what its schedule or trigger gave it when it fired it (None: none of its own)."""
        rows = self._db.rows(select(fires.c.budget_usd).where(fires.c.run == run_id))
        return float(rows[0]["budget_usd"]) if rows and rows[0]["budget_usd"] is not None else None

    def spent(self, tenant: str, day: str) -> dict[str, float]:
        """The tenant's measured spend on ``day`` (YYYY-MM-DD, UTC)."""
        q = select(spend.c.cost_usd, spend.c.input_tokens, spend.c.output_tokens).where(
            spend.c.tenant == tenant, spend.c.day == day)
        rows = self._db.rows(q)
        r = rows[0] if rows else {"cost_usd": 0.0, "input_tokens": 0, "output_tokens": 0}
        return {"cost_usd": r["cost_usd"], "input_tokens": r["input_tokens"], "output_tokens": r["output_tokens"]}


@dataclass(frozen=True)
class _Money:
    """The statements of the money path (``hold``, ``add_usage``), built once per dialect: every model call runs
    them, so they are executed with bound parameters, never built again."""

    touch_day: UpdateBase
    touch_run: UpdateBase
    sweep: UpdateBase
    sums: Select[float, float]
    add_hold: UpdateBase
    onto_day: UpdateBase
    onto_run: UpdateBase
    drop_hold: UpdateBase


@functools.cache
def _money(dialect: dialects.Dialect) -> _Money:
    p = functools.partial(bindparam, type_=Text())
    n = functools.partial(bindparam, type_=Float())
    i = functools.partial(bindparam, type_=dialects.Int64)
    c = runs.c

    def held(where: ColumnElement[bool]) -> ColumnElement[float]:
        return func.coalesce(func.sum(holds.c.amount).filter(where), 0.0)

    day_row = dialects.insert(spend, dialect).values(tenant=p("tenant"), day=p("day"), cost_usd=n("cost"),
                                                     input_tokens=i("tin"), output_tokens=i("tout"))
    return _Money(
        touch_day=dialects.insert(spend, dialect).values(tenant=p("tenant"), day=p("day")).on_conflict_do_update(
            index_elements=[spend.c.tenant, spend.c.day], set_={"cost_usd": spend.c.cost_usd}
        ).returning(spend.c.cost_usd),
        touch_run=update(runs).where(c.id == p("run")).values(cost_usd=c.cost_usd).returning(c.cost_usd),
        sweep=delete(holds).where(holds.c.tenant == p("tenant"), holds.c.expires < n("now")),
        sums=select(held(holds.c.run == p("run")), held(holds.c.day == p("day"))).where(
            holds.c.tenant == p("tenant"), holds.c.expires >= n("now")),
        add_hold=holds.insert().values(id=p("id"), run=p("run"), tenant=p("tenant"), day=p("day"),
                                       amount=n("amount"), owner=p("owner"), expires=n("expires")),
        onto_day=day_row.on_conflict_do_update(index_elements=[spend.c.tenant, spend.c.day], set_={
            "cost_usd": spend.c.cost_usd + day_row.excluded.cost_usd,
            "input_tokens": spend.c.input_tokens + day_row.excluded.input_tokens,
            "output_tokens": spend.c.output_tokens + day_row.excluded.output_tokens}).returning(spend.c.cost_usd),
        onto_run=update(runs).where(c.id == p("run")).values(
            input_tokens=c.input_tokens + i("tin"), output_tokens=c.output_tokens + i("tout"),
            cache_write_tokens=c.cache_write_tokens + i("tcw"), cache_read_tokens=c.cache_read_tokens + i("tcr"),
            cost_usd=c.cost_usd + n("cost")).returning(c.cost_usd),
        drop_hold=delete(holds).where(holds.c.id == p("hold")),
    )
