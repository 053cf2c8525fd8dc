"""The runs table: every state a run goes through, and the writes that move it.

    queued → starting → running → succeeded | failed | aborted | killed | cancelled
    queued → cancelled;  starting → failed (preparation failed)
    running → queued (its sandbox lost: ``lost``, resumed in its own folder) ;  starting → queued (``requeue``)
    running → parked (``park``: waiting for a person, no sandbox) → queued (``unpark``) | cancelled

Transitions are guarded in SQL (``WHERE status IN (...)``) so two writers never both win. A replica writes a live
run it follows through the run's lease (``runs.under(lease)``): every write then also carries the lease's
generation, so a replica whose lease another took over writes nothing more of the run. The service may stop at
any point: the row says where a run was (``event_offset`` / ``event_seq``: how far its events.jsonl was read).
"""

from __future__ import annotations

import functools
import json
import time
from collections.abc import Iterable, Sequence
from typing import Any

import msgspec
from sqlalchemy import ColumnElement, Connection, Text, bindparam, exists, func, literal_column, select, update
from sqlalchemy.sql.dml import UpdateBase

from . import dialects
from .db import Database
from .rows import ACTIVE, COLUMNS, STATUSES, TERMINAL, Ending, Kept, Lease, Loss, Push, Run, RunStatus, ordered, \
    run_of, stored
from .short_ids import HEX_AT
from .tables import leases, runs, wire_audit

__all__ = ["RunsTable", "HeldRun"]

_Runs = list[Run]  # (inside RunsTable, ``list`` is its method)


class _Writes:
    """The named writes of a live run: each returns the run as written, or None when its guard did not hold (its
    status, and — under a lease — that the lease is still the one given)."""

    def __init__(self, db: Database, lease: Lease | None) -> None:
        self._db, self._lease = db, lease

    def record_start(self, run_id: str, *, branch: str | None, base: str | None, folder: str | None = None,
                     token_sha256: str | None = None) -> Run | None:
        """What preparing a starting run made: its branch and base, the warm slot's folder, its token's hash."""
        return self._returning(run_id, ("starting",), branch=branch, base=base, folder=folder,
                               token_sha256=token_sha256)

    def record_slot(self, run_id: str, folder: str | None) -> Run | None:
        """The warm slot a starting run claimed (its folder from now on), or None again when its start was undone."""
        return self._returning(run_id, ("starting",), folder=folder)

    def record_checkout(self, run_id: str, branch: str | None, base: str | None) -> Run | None:
        """The branch and base of a starting run's checkout (None, None: undone)."""
        return self._returning(run_id, ("starting",), branch=branch, base=base)

    def record_token(self, run_id: str, sha256: str | None) -> Run | None:
        """The hash of a live run's gateway token — or None, its token ended (whatever the run's status)."""
        return self._returning(run_id, ACTIVE if sha256 is not None else STATUSES, token_sha256=sha256)

    def record_disk(self, run_id: str, used: int) -> Run | None:
        """How many bytes a live run's folder holds, as last measured."""
        return self._returning(run_id, ACTIVE, disk_bytes=used)

    def record_progress(self, run_id: str, *, event_offset: int, event_seq: int, claimed_cost_usd: float,
                        step: str | None) -> Run | None:
        """How far a live run's events were read, and what they said it spent and is doing."""
        return self._returning(run_id, ACTIVE, event_offset=event_offset, event_seq=event_seq,
                               claimed_cost_usd=claimed_cost_usd, step=step)

    def record_commit(self, run_id: str, sha: str) -> Run | None:
        """The commit a live run's work was taken as (before it is finished)."""
        return self._returning(run_id, ACTIVE, commit_sha=sha)

    def record_running(self, run_id: str, handle: str, *, sandboxes: int = 1) -> Run | None:
        """A starting run whose sandbox the backend started (``handle``: how it is found again; ``sandboxes``: how
        many it has had, this one included)."""
        return self._returning(run_id, ("starting",), status="running", handle=handle, sandboxes=sandboxes,
                               not_before=None)

    def requeue(self, run_id: str, *, resumed: bool = False) -> Run | None:
        """A starting run back in line, as if never taken: nothing of its preparation is kept (a warm slot it
        claimed is swept with the waiting ones) — unless it is a resume (``resumed``): its folder, branch and base
        are its work so far, and stay."""
        if resumed:
            return self._returning(run_id, ("starting",), status="queued")
        return self._returning(run_id, ("starting",), status="queued", started=None, branch=None, base=None,
                               folder=None)

    def lost(self, run_id: str, losses: list[Loss], *, not_before: float, sandboxes: int) -> Run | None:
        """A running run whose sandbox was lost, back in line to be resumed in its own folder (after
        ``not_before``); ``losses``: every loss so far, this one last; ``sandboxes``: how many it has had (at least
        the one lost: a row an older service wrote counts none). Its token ends with the sandbox."""
        return self._returning(run_id, ("running",), status="queued", losses=losses, not_before=not_before,
                               handle=None, token_sha256=None, sandboxes=max(1, sandboxes))

    def record_losses(self, run_id: str, losses: list[Loss]) -> Run | None:
        """A live run's losses, the last one not resumed (it is failed next, every loss listed)."""
        return self._returning(run_id, ACTIVE, losses=losses)

    def park(self, run_id: str, *, at: float, wake_at: float | None) -> Run | None:
        """A running run waiting for a person gives its sandbox back: parked from ``at``, woken by itself at
        ``wake_at`` (its question's timeout) unless an answer comes first."""
        return self._returning(run_id, ("running",), status="parked", parked_at=at, wake_at=wake_at)

    def parked_gone(self, run_id: str) -> Run | None:
        """A parked run's sandbox is gone and its token ended: nothing of it runs any more."""
        return self._returning(run_id, ("parked",), handle=None, token_sha256=None)

    def finish(self, run_id: str, status: Ending, *, ended: float, error: str | None = None,
               kept: Kept | None = None, frm: Iterable[RunStatus] = ACTIVE) -> Run | None:
        """End a run (once: None when it was not in ``frm``); its gateway token's hash goes with it. ``kept``: what
        was taken of its work, written with its end; without it the row keeps what it had (its branch, its commit)."""
        fields: dict[str, Any] = {"status": status, "ended": ended, "error": error, "token_sha256": None}
        if kept is not None:
            fields.update(msgspec.structs.asdict(kept))
        return self._returning(run_id, tuple(frm), **fields)

    def _returning(self, run_id: str, frm: Sequence[RunStatus], **fields: Any) -> Run | None:
        """``UPDATE … WHERE id AND status IN frm [AND the lease is still this one] RETURNING *`` (SQLite ≥ 3.35 and
        PostgreSQL): the guard, the write and the row it left in one statement, so no other writer comes between —
        and a writer whose lease was taken by another replica writes nothing."""
        lease = self._lease
        if lease is not None and lease.run_id != run_id:
            raise ValueError(f"the lease of run {lease.run_id} does not hold run {run_id}")
        q = _guarded_update(tuple(frm), lease is not None, tuple(fields))
        params = {f"v_{k}": stored(k, v) for k, v in fields.items()}
        params["g_id"] = run_id
        if lease is not None:
            params["g_owner"], params["g_generation"] = lease.owner, lease.generation
        with self._db.statement() as t:
            row = t.execute(q, params).mappings().first()
            if row is not None and fields.keys() & {"status", "cancel_requested"}:
                self._db.notify(t)  # begun, requeued, ended, or to be stopped: a slot taken or freed, a stop to make
        return run_of(row) if row is not None else None


class HeldRun(_Writes):
    """The writes of a run held under a lease (``RunsTable.under``): each also requires that the lease is still
    the one given — the fencing token is carried here, never passed by hand."""


class RunsTable(_Writes):
    """The runs: reads, the queue, and the writes no lease fences (a submit, a cancel, what happens to an ended
    run); a live run's writes go through ``under(lease)``."""

    def __init__(self, db: Database) -> None:
        super().__init__(db, None)
        tie = dialects.insertion_order(runs, db.dialect)
        self._order = [runs.c.created, *(c for c in tie if c is not runs.c.created)]

    def under(self, lease: Lease | None) -> HeldRun:
        """The writes of the run ``lease`` holds, fenced by it (None: unfenced, as a run no replica holds yet)."""
        return HeldRun(self._db, lease)

    # -- reads -----------------------------------------------------------------------------
    def get(self, run_id: str, *, tenant: str | None = None) -> Run | None:
        q = select(runs).where(runs.c.id == run_id)
        if tenant is not None:
            q = q.where(runs.c.tenant == tenant)
        rows = self._db.rows(q)
        return run_of(rows[0]) if rows else None

    def ids_starting(self, prefix: str, *, tenant: str, limit: int = 6, hex_part: bool = False) -> list[str]:
        """The ids of ``tenant``'s runs that start with ``prefix`` — or whose hex part does, with ``hex_part``
        (``short_ids``) — at most ``limit``, oldest first: how an id a person typed is resolved, never across
        tenants."""
        where = dialects.starts_with(runs.c.id, prefix, self._db.dialect)
        if hex_part:
            where = where | (func.substr(runs.c.id, HEX_AT + 1, len(prefix)) == prefix)
        q = select(runs.c.id).where(runs.c.tenant == tenant, where).order_by(*self._order).limit(int(limit))
        return [str(r["id"]) for r in self._db.rows(q)]

    def list(self, *, tenant: str | None = None, statuses: Iterable[str] | None = None,
             limit: int | None = None, oldest_first: bool = False, deleted: bool | None = None,
             ended_before: float | None = None) -> _Runs:
        """``deleted``: None = tombstones too, False = without them, True = only them."""
        where: list[ColumnElement[bool]] = []
        if deleted is not None:
            where.append(runs.c.deleted.is_not(None) if deleted else runs.c.deleted.is_(None))
        if ended_before is not None:
            where += [runs.c.ended.is_not(None), runs.c.ended < ended_before]
        if tenant is not None:
            where.append(runs.c.tenant == tenant)
        if statuses is not None:
            where.append(runs.c.status.in_(list(statuses)))
        q = ordered(select(runs).where(*where), self._order, oldest_first, limit)
        return [run_of(r) for r in self._db.rows(q)]

    def count(self, *, statuses: Iterable[str], tenant: str | None = None) -> int:
        q = select(func.count()).select_from(runs).where(runs.c.status.in_(list(statuses)))
        if tenant is not None:
            q = q.where(runs.c.tenant == tenant)
        return int(self._db.scalar(q))

    def folders(self) -> set[str]:
        """The folder names runs took from warm slots (their folders are theirs, not the pool's)."""
        return {str(r["folder"]) for r in self._db.rows(select(runs.c.folder).where(runs.c.folder.is_not(None)))}

    def counts(self) -> dict[tuple[str, str], int]:
        """(tenant, status) → number of runs."""
        q = select(runs.c.tenant, runs.c.status, func.count().label("n")).group_by(runs.c.tenant, runs.c.status)
        return {(str(r["tenant"]), str(r["status"])): int(r["n"]) for r in self._db.rows(q)}

    def active_grants(self) -> _Runs:
        """The runs the model gateway serves: starting or running, with a token."""
        q = select(runs).where(runs.c.status.in_(list(ACTIVE)), runs.c.token_sha256.is_not(None))
        return [run_of(r) for r in self._db.rows(q)]

    def booting(self, since: float) -> int:
        """How many live runs started after ``since`` have sent no model request yet: their sandboxes are starting
        (Python, the imports, the CLI) — what a warm pool's refill would compete with for the CPU."""
        q = select(func.count().label("n")).select_from(
            runs.outerjoin(wire_audit, wire_audit.c.run == runs.c.id)).where(
            runs.c.status.in_(list(ACTIVE)), runs.c.started > since, wire_audit.c.first_request.is_(None))
        return int(self._db.rows(q)[0]["n"])

    def pending_pushes(self) -> _Runs:
        """Runs whose push was under way when the service stopped."""
        q = select(runs).where(runs.c.push.is_not(None),
                               dialects.json_text(runs.c.push, "state", self._db.dialect) == "pending")
        return [run_of(r) for r in self._db.rows(ordered(q, dialects.insertion_order(runs, self._db.dialect), True,
                                                         None))]

    # -- the queue: what waits to start, tenant by tenant ----------------------------------------
    def queued_heads(self, per_tenant: int, *, now: float | None = None) -> _Runs:
        """The oldest ``per_tenant`` queued runs of every tenant, each tenant's oldest first: what a scheduler's
        pass picks from — one tenant's thousand queued runs are read as ``per_tenant`` rows, never all. With
        ``now``, a lost run still in its resume's backoff (``not_before``) is not among them."""
        rank = func.row_number().over(partition_by=runs.c.tenant, order_by=[c.asc() for c in self._order])
        ready = runs.c.status == "queued"
        if now is not None:
            ready = ready & (runs.c.not_before.is_(None) | (runs.c.not_before <= now))
        inner = select(runs, rank.label("queue_rank")).where(ready).subquery()
        q = (select(*(inner.c[c.name] for c in runs.c)).where(inner.c.queue_rank <= max(1, int(per_tenant)))
             .order_by(inner.c.tenant, inner.c.queue_rank))
        return [run_of(r) for r in self._db.rows(q)]

    def create_queued(self, *, id: str, tenant: str, ask: str, options: dict[str, Any], repo: str,
                      cap: int) -> Run | None:
        """``create``, unless ``tenant`` has ``cap`` runs queued already (None then). Counted and inserted in one
        transaction under a lock per tenant (PostgreSQL: an advisory lock; SQLite: its one writer), so two
        replicas taking a tenant's submits at once never pass its cap together."""
        with self._db.transaction() as t:
            if self._db.dialect == "postgresql":
                t.execute(select(func.pg_advisory_xact_lock(func.hashtext(f"flower-queue:{tenant}"))))
            queued = t.execute(select(func.count()).select_from(runs)
                               .where(runs.c.tenant == tenant, runs.c.status == "queued")).scalar_one()
            if int(queued) >= cap:
                return None
            return self._insert_queued(t, id=id, tenant=tenant, ask=ask, options=options, repo=repo)

    def create(self, *, id: str, tenant: str, ask: str, options: dict[str, Any], repo: str) -> Run:
        with self._db.statement() as t:
            return self._insert_queued(t, id=id, tenant=tenant, ask=ask, options=options, repo=repo)

    def _insert_queued(self, t: Connection, *, id: str, tenant: str, ask: str, options: dict[str, Any],
                       repo: str) -> Run:
        row = t.execute(runs.insert().values(id=id, tenant=tenant, ask=ask, status="queued", repo=repo,
                                             options=json.dumps(options, ensure_ascii=False), created=time.time())
                        .returning(*runs.c)).mappings().one()
        self._db.notify(t)
        return run_of(row)

    # -- writes no lease fences ------------------------------------------------------------------
    def update(self, run_id: str, *, only_if: Iterable[str] | None = None, **fields: Any) -> bool:
        """Set fields; with ``only_if`` only when the status is one of those. True when a row changed."""
        bad = set(fields) - set(COLUMNS)
        if bad:
            raise KeyError(f"unknown run fields: {sorted(bad)}")
        q = update(runs).where(runs.c.id == run_id).values({k: stored(k, v) for k, v in fields.items()})
        if only_if is not None:
            q = q.where(runs.c.status.in_(list(only_if)))
        return self._db.write(q) > 0

    def transition(self, run_id: str, to: str, *, frm: Iterable[str], **fields: Any) -> bool:
        if to not in STATUSES:
            raise ValueError(f"unknown status {to!r}")
        return self.update(run_id, only_if=frm, status=to, **fields)

    def begin(self, run_id: str, *, started: float, quota: int | None = None,
              max_running: int | None = None) -> Run | None:
        """A queued run taken to be started (once: None when it was not queued — cancelled, or taken already). With
        ``quota`` (its tenant's) and ``max_running`` (the service's), only while the runs executing stay under both,
        counted and begun in one transaction under one lock (PostgreSQL: an advisory lock; SQLite: its one writer):
        two replicas starting at once never pass a limit together, as each would from its own count."""
        if quota is None and max_running is None:
            return self._returning(run_id, ("queued",), status="starting", started=started)
        try:
            with self._db.transaction() as t:
                if self._db.dialect == "postgresql":
                    t.execute(select(func.pg_advisory_xact_lock(func.hashtext("flower-start"))))
                # the write first: on SQLite it takes the writer's lock at once (a read first, then a write, can
                # meet another process's commit between and fail at once instead of waiting its turn)
                row = t.execute(update(runs).where(runs.c.id == run_id, runs.c.status == "queued")
                                .values(status="starting", started=started).returning(*runs.c)).mappings().first()
                if row is None:
                    return None
                busy = select(func.count()).select_from(runs).where(runs.c.status.in_(ACTIVE))
                if max_running is not None and int(t.execute(busy).scalar_one()) > max_running:
                    raise _Over
                if quota is not None and int(t.execute(busy.where(runs.c.tenant == row["tenant"])).scalar_one()) \
                        > quota:
                    raise _Over
                self._db.notify(t)
        except _Over:
            return None  # rolled back: the run is still queued
        return run_of(row)

    def unpark(self, run_id: str) -> Run | None:
        """A parked run answered (or its question timed out): back in line, to be resumed in a new sandbox. None
        when it was not parked (woken already, or ended)."""
        return self._returning(run_id, ("parked",), status="queued", parked_at=None, wake_at=None)

    def waking(self, now: float, *, limit: int = 100) -> _Runs:
        """Parked runs whose question timed out by ``now``: to be woken with "no answer"."""
        q = select(runs).where(runs.c.status == "parked", runs.c.wake_at.is_not(None), runs.c.wake_at <= now)
        return [run_of(r) for r in self._db.rows(q.limit(limit))]

    def cancel(self, run_id: str, *, at: float) -> Run | None:
        """A cancel asked for: a queued or parked run ends now (no process of it runs), a live one is marked for the
        scheduler to stop; the row as left, or None when the run was neither (ended already)."""
        ended = self._returning(run_id, ("queued", "parked"), status="cancelled", ended=at,
                                error="cancelled on request", cancel_requested=True, token_sha256=None)
        return ended or self._returning(run_id, ACTIVE, cancel_requested=True)

    def record_push(self, run_id: str, push: Push) -> Run | None:
        """Where an ended run's push stands."""
        return self._returning(run_id, TERMINAL, push=push)

    def record_deleted(self, run_id: str, *, at: float | None, files_gone: bool, branch_dropped: bool) -> Run | None:
        """An ended run's files removed (``files_gone``: all of them; ``at``: the first time, else None to keep the
        first time) and its branch with them when ``branch_dropped``."""
        fields: dict[str, Any] = {"disk_bytes": 0 if files_gone else None}
        if at is not None:
            fields["deleted"] = at
        if branch_dropped:
            fields["branch"] = None
        return self._returning(run_id, TERMINAL, **fields)


class _Over(Exception):
    """A begin past a limit: its transaction is rolled back."""


@functools.lru_cache(maxsize=256)
def _guarded_update(frm: tuple[RunStatus, ...], leased: bool, fields: tuple[str, ...]) -> UpdateBase:
    """``_returning``'s statement for one shape of write, built once: its values are bound parameters (``g_id``,
    ``g_owner``, ``g_generation``, ``v_<field>``), so a write costs its execution, not its building."""
    statuses = [literal_column(f"'{x}'", Text()) for x in frm if x in STATUSES]  # ours, as literals: no IN list
    q = update(runs).where(runs.c.id == bindparam("g_id"), runs.c.status.in_(statuses))
    if leased:
        q = q.where(exists().where(leases.c.run_id == bindparam("g_id"), leases.c.owner == bindparam("g_owner"),
                                   leases.c.generation == bindparam("g_generation")))
    return q.values({k: bindparam(f"v_{k}") for k in fields}).returning(*runs.c)
