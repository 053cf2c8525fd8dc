"""The runs registry: every state a run goes through, in one SQLite file (WAL) under data_dir, or in PostgreSQL
when ``database_url`` names one (``open_registry``). One schema for both (``service.tables``), migrated by
Alembic at open (``service.migrate``); what the two databases spell differently is in ``service.dialects``.

    queued → starting → running → succeeded | failed | aborted | killed | cancelled
    queued → cancelled;  starting → failed (preparation failed)

Transitions are guarded in SQL (``WHERE status IN (...)``) so two writers never both win.
The service may stop at any point: the row says where a run was, and the scheduler picks
it up from there (``event_offset`` / ``event_seq``: how far its events.jsonl was read). Beside the runs: each
tenant's spend per day (``spend``) and its webhook deliveries (``deliveries``, ``service.webhooks``).

Nothing in a SQLite file is believed about the host because it is there: a file holding anything a registry of ours
does not (a trigger, a view, another table or index, a column defined otherwise) is refused at open and at
``restore`` (``foreign``), and so is a row that names what is not its own. A run's folder is its id, or the
warm slot (``warm-<hex>``, ``sandbox.pool``) it claimed — no run id looks like one, and no two rows name the same
slot — so a DELETE or a read of one row never reaches another run's files; a local handle names its own row's
folder, and the backend signals a process only when it carries its run's marker and start time.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import re
import sqlite3
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from dataclasses import dataclass
from typing import Any, Iterable, Literal, get_args

import msgspec
from sqlalchemy import (ColumnElement, Connection, Engine, RowMapping, Select, bindparam, delete, exists, func,
                        Float, Text, literal_column, or_, select, text, update)
from sqlalchemy.exc import OperationalError
from sqlalchemy.sql.dml import UpdateBase

from sandbox.backends.local import folder_of
from sandbox.layout import valid_run_id
from sandbox.pool import SLOT_PREFIX

from . import dialects
from .backup import RegistryDamaged, check_registry
from .errors import RegistryNewer, RegistryUnreachable
from .migrate import migrate
from .config import ServiceConfig
from .tables import ADDED_SINCE_V1, deliveries, holds, leases, replicas, runs, spend, streams, wire_audit

__all__ = ["Registry", "Run", "Kept", "Lease", "Standing", "Spent", "RunStatus", "Ending", "Push", "Delivery", "ACTIVE", "TERMINAL",
           "STATUSES", "SCHEMA", "Replica",
           "foreign", "open_registry"]

RunStatus = Literal["queued", "starting", "running", "succeeded", "failed", "aborted", "cancelled", "killed"]
"""Every status a run is in (the diagram above); ``service.api.schemas.Status`` is this one."""
Ending = Literal["succeeded", "failed", "aborted", "cancelled", "killed"]
STATUSES: tuple[RunStatus, ...] = get_args(RunStatus)
ACTIVE: tuple[RunStatus, ...] = ("starting", "running")
TERMINAL: tuple[Ending, ...] = get_args(Ending)
CHANNEL = "flower_runs"  # PostgreSQL's NOTIFY channel: a run queued, or its status changed
SCHEMA = 7  # SQLite's PRAGMA user_version this code writes (service/migrations/versions/v0005_replicas.py)

_SLOT = re.compile(re.escape(SLOT_PREFIX) + r"[0-9a-f]{1,58}")


class Push(msgspec.Struct, kw_only=True):
    """A finished run's branch pushed to its tenant's ``push_url`` (``service.push``): pending while the push runs,
    then pushed or failed (``error`` names why, never the credential)."""
    state: Literal["pending", "pushed", "failed"]
    url: str
    ref: str
    commit: str
    error: str | None = None
    at: float | None = None
    attempts: int = 0


DeliveryState = Literal["pending", "delivered", "failed"]


class Delivery(msgspec.Struct, kw_only=True):
    """One webhook delivery (``service.webhooks``): the signed body as first built, and how its tries went."""
    id: str
    tenant: str
    run: str
    event: str
    body: bytes
    created: float
    state: DeliveryState = "pending"
    attempts: int = 0
    last_status: int | None = None
    """The HTTP status of the last try (None: no answer — refused, timed out)."""
    last_error: str | None = None
    next_try: float | None = None
    ended: float | None = None
    """When it was delivered, or given up on."""


class Lease(msgspec.Struct, kw_only=True, frozen=True):
    """A replica's hold on one live run (``Registry.take``): ``generation`` is the fencing token its writes carry."""

    run_id: str
    owner: str
    generation: int
    expires: float


class Replica(msgspec.Struct, kw_only=True, frozen=True):
    """Who holds a replica's name (``Registry.claim_name``): one process, until its heartbeat runs out."""

    name: str
    instance: str
    """Random at each start: two processes under one name are two instances."""
    process: str
    """Where the holder runs (``service.leases.process_mark``), to tell at once that a holder on this host is gone."""
    heartbeat: float
    expires: float


class Standing(msgspec.Struct, kw_only=True, frozen=True):
    """A run and its tenant's day as ``Registry.hold`` found them, under the day's lock: what the gateway metered
    (spent) and what the calls in flight may still cost (held, the new call's not included)."""

    run_spent: float
    run_held: float
    day_spent: float
    day_held: float
    taken: bool
    """The call's hold was written: spent, held and the call's own most were within both caps."""


class Spent(msgspec.Struct, kw_only=True, frozen=True):
    """What a run and its tenant's day have spent after an answer was metered (``Registry.add_usage``)."""

    run: float
    day: float


class Kept(msgspec.Struct, kw_only=True, frozen=True):
    """What the row keeps of an ended run's work (``Registry.finish``): every field is written, None included."""

    commit_sha: str | None
    branch: str | None
    diffstat: dict[str, Any] | None
    claimed_cost_usd: float
    disk_bytes: int | None


class Run(msgspec.Struct, kw_only=True):
    id: str
    tenant: str
    ask: str
    options: dict[str, Any]
    status: RunStatus
    repo: str = ""
    handle: str | None = None
    branch: str | None = None
    base: str | None = None
    commit_sha: str | None = None
    created: float
    started: float | None = None
    ended: float | None = None
    cost_usd: float = 0.0
    error: str | None = None
    step: str | None = None
    diffstat: dict[str, Any] | None = None
    event_offset: int = 0
    event_seq: int = 0
    cancel_requested: bool = False
    input_tokens: int = 0
    output_tokens: int = 0
    cache_write_tokens: int = 0
    cache_read_tokens: int = 0
    claimed_cost_usd: float = 0.0
    """What the run itself reported; ``cost_usd`` is what the gateway measured on the wire."""
    token_sha256: str | None = None
    """The hash of the run's gateway token while it is live."""
    folder: str | None = None
    """The name of the run's folder when it is not the run id: the warm slot it claimed (``sandbox.pool``)."""
    disk_bytes: int | None = None
    """What the run's folder took on disk when last measured (bounded by ``max_run_disk_mb``)."""
    deleted: float | None = None
    """When its files were removed (DELETE or ``retain_days``); the row stays as a tombstone."""
    push: Push | None = None
    """Its branch pushed to the tenant's git remote (``push_url``), or why not."""

    @property
    def terminal(self) -> bool:
        return self.status in TERMINAL



_COLUMNS = Run.__struct_fields__
_Runs = list[Run]  # (inside Registry, ``list`` is its method)
_Deliveries = list[Delivery]


def _plain(r: RowMapping | sqlite3.Row) -> dict[str, Any]:
    """A row as a dict keyed by plain ``str`` (SQLAlchemy's column names are a ``str`` subclass msgspec refuses)."""
    return {str(k): r[k] for k in r.keys()}


def _convert(r: RowMapping | sqlite3.Row) -> Run:
    d = _plain(r)
    d["options"] = json.loads(d["options"] or "{}")
    d["diffstat"] = json.loads(d["diffstat"]) if d["diffstat"] else None
    d["push"] = json.loads(d["push"]) if d.get("push") else None
    d["cancel_requested"] = bool(d["cancel_requested"])
    return msgspec.convert(d, Run)


def _row(r: RowMapping | sqlite3.Row) -> Run:
    """A row as a Run, refused if it names what is not its own (whatever wrote the row)."""
    run = _convert(r)
    wrong = _not_its_own(run)
    if wrong:
        raise RegistryDamaged(f"the registry holds {wrong}: restore a backup this service made")
    return run


def _not_its_own(run: Run) -> str | None:
    """What the row names that cannot be its own (its id, its folder, its handle's folder), or None."""
    if not valid_run_id(run.id) or run.id.startswith(SLOT_PREFIX):
        return f"a run with the id {run.id!r}, which no service gives (a folder of that name is not a run's)"
    if run.folder is not None and not _SLOT.fullmatch(run.folder):
        return (f"run {run.id} (tenant {run.tenant}) naming the folder {run.folder!r}: a run's folder is its id "
                f"or a warm slot's {SLOT_PREFIX}<hex>")
    named = folder_of(run.handle) if run.handle else None
    if named is not None and named.name != (run.folder or run.id):
        return f"run {run.id} (tenant {run.tenant}) whose handle names the folder {str(named)!r}, not its own"
    return None


@functools.cache
def _fresh_schema() -> dict[str, tuple[str, str, str | None]]:
    """name → (type, table, sql) of what a fresh registry file holds: the migrations run on an empty database."""
    engine = dialects.sqlite_engine(Path(":memory:"))
    try:
        migrate(engine, where="a fresh registry")
        with engine.connect() as c:
            rows = c.exec_driver_sql("SELECT type, name, tbl_name, sql FROM sqlite_master").all()
    finally:
        engine.dispose()
    return {str(r[1]): (str(r[0]), str(r[2]), r[3]) for r in rows}


def _definitions(sql: str) -> list[str]:
    """A CREATE TABLE's column definitions and constraints, one by one, whitespace folded (split at the commas
    outside parentheses; a quoted comma only makes a definition that is not ours)."""
    body = sql[sql.index("(") + 1:sql.rindex(")")]
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(body):
        depth += {"(": 1, ")": -1}.get(ch, 0)
        if ch == "," and depth == 0:
            parts.append(body[start:i])
            start = i + 1
    parts.append(body[start:])
    return [" ".join(p.split()) for p in parts if p.strip()]


def foreign(db: sqlite3.Connection) -> str | None:
    """What ``db`` holds that a registry of this service does not, as a phrase, or None when it is ours: its
    schema (``_foreign_schema``), then its rows — each naming only what is its own (``_not_its_own``), no two
    the same folder or handle."""
    return _foreign_schema(db) or _foreign_rows(db)


def _foreign_schema(db: sqlite3.Connection) -> str | None:
    """Compared with what a fresh registry creates: every trigger and view is foreign, so is any table or index
    we do not create or define otherwise, and any column not defined as ours (one we added since may be
    missing: an older service wrote the file)."""
    ours = _fresh_schema()
    for kind, name, table, sql in db.execute("SELECT type, name, tbl_name, sql FROM sqlite_master "
                                             "ORDER BY type DESC, name"):  # views and triggers first
        if kind in ("trigger", "view"):
            return f"a {kind} `{name}` (on {table}); a registry has none"
        if name not in ours or ours[name][:2] != (kind, table):
            what = f"an index `{name}` on {table}" if kind == "index" else f"a {kind} `{name}`"
            return f"{what} that a registry does not have"
        want = ours[name][2]
        if kind == "index" and (sql and " ".join(sql.split())) != (want and " ".join(want.split())):
            return f"the index `{name}` defined as {sql!r}, not as ours"
        if kind == "table":
            extra = [d for d in _definitions(sql) if d not in _definitions(want or "")]
            if extra:
                return f"the table `{name}` with `{extra[0]}`, which is not how a registry defines it"
            missing = [d.split()[0] for d in _definitions(want or "") if d not in _definitions(sql)]
            if missing and (name != "runs" or any(column not in ADDED_SINCE_V1 for column in missing)):
                return f"the table `{name}` without its `{missing[0]}`"
    return None


def _foreign_rows(db: sqlite3.Connection) -> str | None:
    if not db.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'runs'").fetchone():
        return None  # nothing of ours yet: an empty file
    rows = db.cursor()
    rows.row_factory = sqlite3.Row
    seen: dict[tuple[str, str], str] = {}  # (what, value) → the run that names it
    for r in rows.execute("SELECT * FROM runs"):
        try:
            run = _convert(r)
        except (msgspec.ValidationError, ValueError, TypeError) as e:
            return f"a row of runs that is not a run's ({e})"
        wrong = _not_its_own(run)
        if wrong:
            return wrong
        for what, value in (("folder", run.folder), ("handle", run.handle)):
            other = seen.setdefault((what, value), run.id) if value is not None else run.id
            if other != run.id:
                return f"runs {other} and {run.id} both naming the {what} {value!r}"
    return _foreign_deliveries(db)


def _foreign_deliveries(db: sqlite3.Connection) -> str | None:
    """Each delivery is a delivery, of a run of the tenant it names (a restored file signs nothing else)."""
    if not db.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'deliveries'").fetchone():
        return None
    rows = db.cursor()
    rows.row_factory = sqlite3.Row
    for r in rows.execute("SELECT d.*, runs.tenant AS owner FROM deliveries d LEFT JOIN runs ON runs.id = d.run"):
        fields = dict(r)
        owner = fields.pop("owner")
        try:
            d = msgspec.convert(fields, Delivery)
        except msgspec.ValidationError as e:
            return f"a row of deliveries that is not a delivery's ({e})"
        if owner != d.tenant:
            return (f"a webhook delivery {d.id!r} of tenant {d.tenant} for run {d.run}, which is not a run of that "
                    "tenant")
    return None


_NO_LOCK = contextlib.nullcontext()  # PostgreSQL keeps its writers apart itself: no lock in the process


class Registry:
    """Thread-safe: on SQLite one connection behind one lock, on PostgreSQL a pool; every call is one short
    transaction, and every guard is in the SQL (``WHERE status IN …``, ``ON CONFLICT``), so two writers —
    two threads, or two replicas on one PostgreSQL — never both win."""

    path: Path | None
    """The SQLite file (None on PostgreSQL)."""
    where: str
    """The file, or the database and host: for sentences (never a password)."""
    dialect: dialects.Dialect
    revision: str
    """The migration the database is at (``service.migrate``)."""
    migrated_from: str | None
    """Where this open found it, when this open migrated it (None: it was at ``revision`` already)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.where = str(self.path)
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        check_registry(self.path)  # a truncated or corrupt file stops the service with the way to restore it
        os.close(os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600))  # SQLite gives -wal/-shm its mode
        self._start(dialects.sqlite_engine(self.path), "sqlite", threading.RLock())
        try:
            with self._lock:
                self._refuse_sqlite(self.path)
                self.migrated_from, self.revision = migrate(self._engine, where=self.where)
        except BaseException:
            self._engine.dispose()
            raise

    @classmethod
    def postgres(cls, url: str, *, lock_timeout_s: float = 60.0) -> Registry:
        """The registry in the PostgreSQL database ``url`` names, migrated (once, whichever replica is first)."""
        parsed = dialects.postgres_url(url)
        self = cls.__new__(cls)
        self.path, self.where = None, dialects.describe(parsed)
        self._start(dialects.postgres_engine(parsed), "postgresql", _NO_LOCK)
        try:
            with self._engine.connect():
                pass
        except OperationalError as e:
            self._engine.dispose()
            reason = " ".join(str(e.orig or e).split())
            raise RegistryUnreachable(
                f"the registry's {self.where} cannot be reached ({reason}): check database_url and that the "
                "server is up", host=parsed.host or str(parsed.query.get("host") or ""),
                database=parsed.database or "") from None
        try:
            self.migrated_from, self.revision = migrate(self._engine, where=self.where, lock_timeout_s=lock_timeout_s)
        except BaseException:
            self._engine.dispose()
            raise
        return self

    def _start(self, engine: Engine, dialect: dialects.Dialect,
               lock: contextlib.AbstractContextManager[object]) -> None:
        self._engine, self.dialect, self._lock = engine, dialect, lock
        # One statement needs no transaction around it: on PostgreSQL each commits itself, so a call is one round
        # trip, not BEGIN, it, COMMIT (SQLite's transactions are in-process: begun as ever).
        self._one = engine.execution_options(isolation_level="AUTOCOMMIT") if dialect == "postgresql" else engine
        tie = dialects.insertion_order(runs, dialect)
        self._runs_order = [runs.c.created, *(c for c in tie if c is not runs.c.created)]
        self._deliveries_order = dialects.insertion_order(deliveries, dialect)

    def _refuse_sqlite(self, path: Path) -> None:
        """A file a newer service wrote, or one holding what ours does not, is refused before anything is changed."""
        with self._engine.connect() as c:
            raw = c.connection.dbapi_connection
            assert isinstance(raw, sqlite3.Connection)
            version = int(raw.execute("PRAGMA user_version").fetchone()[0])
            if version > SCHEMA:
                raise RegistryNewer(f"registry {path} was written by a newer service (schema {version}); upgrade "
                                    "the service or point data_dir elsewhere", where=str(path), found=str(version),
                                    known=str(SCHEMA))
            found = foreign(raw)
        if found:
            raise RegistryDamaged(
                f"the registry {path} holds {found}: this service did not write that, so it will not "
                f"start on it; restore a backup with `python -m service restore <backup file>`, or move "
                f"{path.name} aside to start with an empty registry")

    def close(self) -> None:
        with self._lock:
            self._engine.dispose()

    # -- the two ways a statement runs ---------------------------------------------------------
    def _rows(self, statement: Select[Any]) -> Sequence[RowMapping]:
        with self._lock, self._one.connect() as c:
            return c.execute(statement).mappings().all()

    def _write(self, statement: UpdateBase) -> int:
        """One statement, committed; the number of rows it changed."""
        with self._statement() as c:
            return int(c.execute(statement).rowcount)

    @contextlib.contextmanager
    def _statement(self) -> Iterator[Connection]:
        """For one write statement (and a NOTIFY after it): committed by itself on PostgreSQL."""
        with self._lock, self._one.begin() as c:
            yield c

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[Connection]:
        with self._lock, self._engine.begin() as c:
            yield c

    # -- reads -----------------------------------------------------------------------------
    def get(self, run_id: str, *, tenant: str | None = None) -> Run | None:
        q = select(runs).where(runs.c.id == run_id)
        if tenant is not None:
            q = q.where(runs.c.tenant == tenant)
        rows = self._rows(q)
        return _row(rows[0]) if rows else None

    def ids_starting(self, prefix: str, *, tenant: str, limit: int = 6) -> list[str]:
        """The ids of ``tenant``'s runs that start with ``prefix`` (at most ``limit``, oldest first): how a short
        id a person typed is resolved, never across tenants."""
        q = (select(runs.c.id).where(runs.c.tenant == tenant, dialects.starts_with(runs.c.id, prefix, self.dialect))
             .order_by(*self._runs_order).limit(int(limit)))
        return [str(r["id"]) for r in self._rows(q)]

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
        q = _ordered(select(runs).where(*where), self._runs_order, oldest_first, limit)
        return [_row(r) for r in self._rows(q)]

    def count(self, *, statuses: Iterable[str], tenant: str | None = None) -> int:
        q = select(func.count()).select_from(runs).where(runs.c.status.in_(list(statuses)))
        if tenant is not None:
            q = q.where(runs.c.tenant == tenant)
        with self._lock, self._engine.connect() as c:
            return int(c.execute(q).scalar_one())

    def folders(self) -> set[str]:
        """The folder names runs took from warm slots (their folders are theirs, not the pool's)."""
        return {str(r["folder"]) for r in self._rows(select(runs.c.folder).where(runs.c.folder.is_not(None)))}

    def counts(self) -> dict[tuple[str, str], int]:
        """(tenant, status) → number of runs."""
        q = select(runs.c.tenant, runs.c.status, func.count().label("n")).group_by(runs.c.tenant, runs.c.status)
        return {(str(r["tenant"]), str(r["status"])): int(r["n"]) for r in self._rows(q)}

    # -- the queue: what waits to start, tenant by tenant ----------------------------------------
    def queued_heads(self, per_tenant: int) -> _Runs:
        """The oldest ``per_tenant`` queued runs of every tenant, each tenant's oldest first: what a scheduler's
        pass picks from — one tenant's thousand queued runs are read as ``per_tenant`` rows, never all."""
        rank = func.row_number().over(partition_by=runs.c.tenant, order_by=[c.asc() for c in self._runs_order])
        inner = select(runs, rank.label("queue_rank")).where(runs.c.status == "queued").subquery()
        q = (select(*(inner.c[c.name] for c in runs.c)).where(inner.c.queue_rank <= max(1, int(per_tenant)))
             .order_by(inner.c.tenant, inner.c.queue_rank))
        return [_row(r) for r in self._rows(q)]

    def create_queued(self, *, id: str, tenant: str, ask: str, options: dict[str, Any], repo: str,
                      cap: int) -> Run | None:
        """``create``, unless ``tenant`` has ``cap`` runs queued already (None then). Counted and inserted in one
        transaction under a lock per tenant (PostgreSQL: an advisory lock; SQLite: its one writer), so two
        replicas taking a tenant's submits at once never pass its cap together."""
        with self._transaction() as t:
            if self.dialect == "postgresql":
                t.execute(select(func.pg_advisory_xact_lock(func.hashtext(f"flower-queue:{tenant}"))))
            queued = t.execute(select(func.count()).select_from(runs)
                               .where(runs.c.tenant == tenant, runs.c.status == "queued")).scalar_one()
            if int(queued) >= cap:
                return None
            return self._insert_queued(t, id=id, tenant=tenant, ask=ask, options=options, repo=repo)

    # -- writes ----------------------------------------------------------------------------
    def create(self, *, id: str, tenant: str, ask: str, options: dict[str, Any], repo: str) -> Run:
        with self._statement() as t:
            return self._insert_queued(t, id=id, tenant=tenant, ask=ask, options=options, repo=repo)

    def _insert_queued(self, t: Connection, *, id: str, tenant: str, ask: str, options: dict[str, Any],
                       repo: str) -> Run:
        row = t.execute(runs.insert().values(id=id, tenant=tenant, ask=ask, status="queued", repo=repo,
                                             options=json.dumps(options, ensure_ascii=False), created=time.time())
                        .returning(*runs.c)).mappings().one()
        self._notify(t)
        return _row(row)

    def update(self, run_id: str, *, only_if: Iterable[str] | None = None, **fields: Any) -> bool:
        """Set fields; with ``only_if`` only when the status is one of those. True when a row changed."""
        bad = set(fields) - set(_COLUMNS)
        if bad:
            raise KeyError(f"unknown run fields: {sorted(bad)}")
        q = update(runs).where(runs.c.id == run_id).values({k: _stored(k, v) for k, v in fields.items()})
        if only_if is not None:
            q = q.where(runs.c.status.in_(list(only_if)))
        return self._write(q) > 0

    def add_usage(self, run_id: str, tenant: str, day: str, *, input_tokens: int, output_tokens: int,
                  cache_write_tokens: int, cache_read_tokens: int, cost_usd: float, hold: str | None = None) -> Spent:
        """What the gateway measured for one answer: onto the tenant's day and the run, and the call's ``hold`` let
        go, in one transaction (the money is never counted twice, nor for a moment not at all). The day's row is
        written first, as ``hold`` does: the two take their locks in one order."""
        sql = _money(self.dialect)
        with self._transaction() as t:
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
        sql = _money(self.dialect)
        with self._transaction() as t:
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
        self._write(delete(holds).where(holds.c.id == hold_id))

    def renew_holds(self, owner: str, *, now: float, ttl: float) -> int:
        """``owner``'s holds kept until ``now + ttl``: a call in flight longer than a hold's ttl still counts."""
        return self._write(update(holds).where(holds.c.owner == owner).values(expires=now + ttl))

    def release_holds(self, owner: str) -> int:
        """Every hold ``owner`` took: a gateway started again under that name lets go of its dead self's calls."""
        return self._write(delete(holds).where(holds.c.owner == owner))

    def spent(self, tenant: str, day: str) -> dict[str, float]:
        """The tenant's measured spend on ``day`` (YYYY-MM-DD, UTC)."""
        q = select(spend.c.cost_usd, spend.c.input_tokens, spend.c.output_tokens).where(
            spend.c.tenant == tenant, spend.c.day == day)
        rows = self._rows(q)
        r = rows[0] if rows else {"cost_usd": 0.0, "input_tokens": 0, "output_tokens": 0}
        return {"cost_usd": r["cost_usd"], "input_tokens": r["input_tokens"], "output_tokens": r["output_tokens"]}

    def record_wire_audit(self, run_id: str, counts: Counter[str]) -> None:
        """The gateway's audit counts of a run as they stand (its process writes them; the scheduler compares them
        with the run's own at the end)."""
        q = dialects.insert(wire_audit, self.dialect).values(
            run=run_id, tool_calls=counts["tool_call"], denials=counts["deny"], spills=counts["spill"])
        self._write(q.on_conflict_do_update(index_elements=[wire_audit.c.run], set_={
            "tool_calls": q.excluded.tool_calls, "denials": q.excluded.denials, "spills": q.excluded.spills}))

    def record_first_request(self, run_id: str, at: float) -> None:
        """When the gateway saw the run's first model request (a gateway started again later keeps the first)."""
        q = dialects.insert(wire_audit, self.dialect).values(run=run_id, first_request=at)
        self._write(q.on_conflict_do_update(index_elements=[wire_audit.c.run], set_={
            "first_request": func.coalesce(wire_audit.c.first_request, q.excluded.first_request)}))

    def first_request(self, run_id: str) -> float | None:
        """What ``record_first_request`` kept, or None."""
        rows = self._rows(select(wire_audit.c.first_request).where(wire_audit.c.run == run_id))
        return float(rows[0]["first_request"]) if rows and rows[0]["first_request"] is not None else None

    def booting(self, since: float) -> int:
        """How many live runs started after ``since`` have sent no model request yet: their sandboxes are starting
        (Python, the imports, the CLI) — what a warm pool's refill would compete with for the CPU."""
        q = select(func.count().label("n")).select_from(
            runs.outerjoin(wire_audit, wire_audit.c.run == runs.c.id)).where(
            runs.c.status.in_(list(ACTIVE)), runs.c.started > since, wire_audit.c.first_request.is_(None))
        return int(self._rows(q)[0]["n"])

    def wire_counts(self, run_id: str) -> Counter[str] | None:
        """What ``record_wire_audit`` last wrote for the run, or None when the gateway counted nothing of it."""
        rows = self._rows(select(wire_audit).where(wire_audit.c.run == run_id))
        if not rows:
            return None
        r = rows[0]
        return Counter({"tool_call": int(r["tool_calls"]), "deny": int(r["denials"]), "spill": int(r["spills"])})

    def active_grants(self) -> _Runs:
        """The runs the model gateway serves: starting or running, with a token."""
        q = select(runs).where(runs.c.status.in_(list(ACTIVE)), runs.c.token_sha256.is_not(None))
        return [_row(r) for r in self._rows(q)]

    def transition(self, run_id: str, to: str, *, frm: Iterable[str], **fields: Any) -> bool:
        if to not in STATUSES:
            raise ValueError(f"unknown status {to!r}")
        return self.update(run_id, only_if=frm, status=to, **fields)

    # -- leases: which replica follows each live run (``service.tables.leases``) -------------------------------
    def take(self, run_id: str, owner: str, *, ttl: float, now: float) -> Lease | None:
        """Hold ``run_id`` for ``owner`` until ``now + ttl``: when no one holds it, its lease has expired, or
        ``owner`` holds it already (a replica started again under its name). The generation goes up either way —
        whatever held it before writes nothing more. None when another replica holds it still."""
        with self._statement() as t:
            row = t.execute(_take(self.dialect), {"run_id": run_id, "owner": owner, "now": now,
                                                  "expires": now + ttl}).mappings().first()
        return msgspec.convert(_plain(row), Lease) if row is not None else None

    def renew(self, owner: str, *, ttl: float, now: float) -> dict[str, Lease]:
        """Every lease ``owner`` still holds, moved on to ``now + ttl`` — a run missing here is another's now. One that
        ran out while renewals failed (a full disk, the database away) and that no one took since is still its own."""
        q = (update(leases).where(leases.c.owner == owner)
             .values(expires=now + ttl).returning(*leases.c))
        with self._statement() as t:
            rows = t.execute(q).mappings().all()
        return {str(r["run_id"]): msgspec.convert(_plain(r), Lease) for r in rows}

    def unheld(self, *, now: float) -> tuple[str, ...]:
        """The live runs no replica holds: never taken, or their lease expired (their replica stopped renewing)."""
        held = select(leases.c.run_id).where(leases.c.expires >= now)
        q = (select(runs.c.id).where(runs.c.status.in_(ACTIVE), runs.c.id.not_in(held))
             .order_by(runs.c.created))
        return tuple(str(r["id"]) for r in self._rows(q))

    def release(self, lease: Lease) -> None:
        """Let go of a run (it ended, or went back in line) — only the lease given: a newer one stays."""
        with self._statement() as t:
            t.execute(delete(leases).where(leases.c.run_id == lease.run_id, leases.c.owner == lease.owner,
                                           leases.c.generation == lease.generation))

    # -- replica names: one live process per ``replica`` name (``service.tables.replicas``) ---------------------
    def claim_name(self, name: str, instance: str, process: str, *, ttl: float, now: float,
                   over: str | None = None) -> Replica:
        """Hold ``name`` for ``instance`` until ``now + ttl``: when no one holds it, its holder's heartbeat ran out,
        ``instance`` holds it already, or ``over`` does (a holder known to be gone). The row as it stands after:
        ``instance``'s when claimed, else the live holder's."""
        new = dialects.insert(replicas, self.dialect).values(name=name, instance=instance, process=process,
                                                             heartbeat=now, expires=now + ttl)
        taken = or_(replicas.c.expires < now, replicas.c.instance == instance,
                    *([replicas.c.instance == over] if over is not None else []))
        q = new.on_conflict_do_update(index_elements=[replicas.c.name],
                                      set_={"instance": instance, "process": process, "heartbeat": now,
                                            "expires": now + ttl}, where=taken).returning(*replicas.c)
        with self._statement() as t:
            row = t.execute(q).mappings().first()
        if row is None:
            row = self._rows(select(replicas).where(replicas.c.name == name))[0]
        return msgspec.convert(_plain(row), Replica)

    def beat(self, name: str, instance: str, *, ttl: float, now: float) -> bool:
        """``instance``'s heartbeat under ``name``, moved on to ``now + ttl``; False when another instance holds
        the name now (this one's heartbeat ran out and another process claimed it)."""
        return self._write(update(replicas).where(replicas.c.name == name, replicas.c.instance == instance)
                           .values(heartbeat=now, expires=now + ttl)) == 1

    def release_name(self, name: str, instance: str) -> None:
        """A graceful stop: the name is free at once (only if still ``instance``'s)."""
        self._write(delete(replicas).where(replicas.c.name == name, replicas.c.instance == instance))

    # -- SSE streams per tenant, across replicas (``service.streams``) ------------------------------------------
    def take_stream(self, tenant: str, holder: str, *, replica: str, cap: int, now: float,
                    ttl: float) -> int | None:
        """One of ``tenant``'s ``cap`` stream slots for ``holder`` (a stream of ``replica``'s) until ``now + ttl``,
        or None when every one is held: a free or run-out slot is taken by its primary key, so two replicas never
        both get the same one."""
        for _ in range(3):  # another replica took the slot picked a moment ago: pick again
            held = {int(r["slot"]) for r in self._rows(select(streams.c.slot).where(
                streams.c.tenant == tenant, streams.c.slot < cap, streams.c.expires >= now))}
            free = next((i for i in range(cap) if i not in held), None)
            if free is None:
                return None
            new = dialects.insert(streams, self.dialect).values(tenant=tenant, slot=free, replica=replica,
                                                                holder=holder, expires=now + ttl)
            q = new.on_conflict_do_update(index_elements=[streams.c.tenant, streams.c.slot],
                                          set_={"replica": replica, "holder": holder, "expires": now + ttl},
                                          where=streams.c.expires < now).returning(streams.c.slot)
            with self._statement() as t:
                if t.execute(q).first() is not None:
                    return free
        return None

    def renew_streams(self, holders: Sequence[str], *, now: float, ttl: float) -> None:
        """The slots of the streams still open here, kept until ``now + ttl``."""
        if holders:
            self._write(update(streams).where(streams.c.holder.in_(list(holders))).values(expires=now + ttl))

    def release_streams(self, replica: str | None) -> int:
        """Every slot ``replica`` held (None: every slot) — it starts again, and its streams died with its last self."""
        q = delete(streams)
        return self._write(q if replica is None else q.where(streams.c.replica == replica))

    def give_back_stream(self, tenant: str, slot: int, holder: str) -> None:
        """A stream ended: its slot is free (only if still ``holder``'s: one that ran out may be another's now)."""
        self._write(delete(streams).where(streams.c.tenant == tenant, streams.c.slot == slot,
                                          streams.c.holder == holder))

    # -- named writes: each returns the run as written, or None when its guard did not hold -----------------
    def record_start(self, run_id: str, *, branch: str | None, base: str | None, folder: str | None = None,
                     token_sha256: str | None = None, lease: Lease | None = None) -> Run | None:
        """What preparing a starting run made: its branch and base, the warm slot's folder, its token's hash."""
        return self._returning(run_id, ("starting",), lease, branch=branch, base=base, folder=folder,
                               token_sha256=token_sha256)

    def record_slot(self, run_id: str, folder: str | None, *, lease: Lease | None = None) -> Run | None:
        """The warm slot a starting run claimed (its folder from now on), or None again when its start was undone."""
        return self._returning(run_id, ("starting",), lease, folder=folder)

    def record_checkout(self, run_id: str, branch: str | None, base: str | None, *,
                        lease: Lease | None = None) -> Run | None:
        """The branch and base of a starting run's checkout (None, None: undone)."""
        return self._returning(run_id, ("starting",), lease, branch=branch, base=base)

    def record_token(self, run_id: str, sha256: str | None, *, lease: Lease | None = None) -> Run | None:
        """The hash of a live run's gateway token — or None, its token ended (whatever the run's status)."""
        return self._returning(run_id, ACTIVE if sha256 is not None else STATUSES, lease, token_sha256=sha256)

    def record_disk(self, run_id: str, used: int, *, lease: Lease | None = None) -> Run | None:
        """How many bytes a live run's folder holds, as last measured."""
        return self._returning(run_id, ACTIVE, lease, disk_bytes=used)

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

    def record_progress(self, run_id: str, *, event_offset: int, event_seq: int, claimed_cost_usd: float,
                        step: str | None, lease: Lease | None = None) -> Run | None:
        """How far a live run's events were read, and what they said it spent and is doing."""
        return self._returning(run_id, ACTIVE, lease, event_offset=event_offset, event_seq=event_seq,
                               claimed_cost_usd=claimed_cost_usd, step=step)

    def record_commit(self, run_id: str, sha: str, *, lease: Lease | None = None) -> Run | None:
        """The commit a live run's work was taken as (before it is finished)."""
        return self._returning(run_id, ACTIVE, lease, commit_sha=sha)

    def begin(self, run_id: str, *, started: float) -> Run | None:
        """A queued run taken to be started (once: None when it was not queued — cancelled, or taken already)."""
        return self._returning(run_id, ("queued",), status="starting", started=started)

    def record_running(self, run_id: str, handle: str, *, lease: Lease | None = None) -> Run | None:
        """A starting run whose sandbox the backend started (``handle``: how it is found again)."""
        return self._returning(run_id, ("starting",), lease, status="running", handle=handle)

    def requeue(self, run_id: str, *, lease: Lease | None = None) -> Run | None:
        """A starting run back in line, as if never taken: nothing of its preparation is kept (a warm slot it
        claimed is swept with the waiting ones)."""
        return self._returning(run_id, ("starting",), lease, status="queued", started=None, branch=None,
                               base=None, folder=None)

    def cancel(self, run_id: str, *, at: float) -> Run | None:
        """A cancel asked for: a queued run ends now, a live one is marked for the scheduler to stop; the row as
        left, or None when the run was neither (ended already)."""
        ended = self._returning(run_id, ("queued",), status="cancelled", ended=at, error="cancelled on request",
                                cancel_requested=True)
        return ended or self._returning(run_id, ACTIVE, cancel_requested=True)

    def finish(self, run_id: str, status: Ending, *, ended: float, error: str | None = None,
               kept: Kept | None = None, frm: Iterable[RunStatus] = ACTIVE, lease: Lease | None = None) -> Run | None:
        """End a run (once: None when it was not in ``frm``); its gateway token's hash goes with it. ``kept``: what
        was taken of its work, written with its end; without it the row keeps what it had (its branch, its commit)."""
        fields: dict[str, Any] = {"status": status, "ended": ended, "error": error, "token_sha256": None}
        if kept is not None:
            fields.update(msgspec.structs.asdict(kept))
        return self._returning(run_id, tuple(frm), lease, **fields)

    def _returning(self, run_id: str, frm: Sequence[RunStatus], lease: Lease | None = None,
                   **fields: Any) -> Run | None:
        """``UPDATE … WHERE id AND status IN frm [AND the lease is still lease] RETURNING *`` (SQLite ≥ 3.35 and
        PostgreSQL): the guard, the write and the row it left in one statement, so no other writer comes between —
        and a writer whose lease was taken by another replica writes nothing."""
        q = _guarded_update(tuple(frm), lease is not None, tuple(fields))
        params = {f"v_{k}": _stored(k, v) for k, v in fields.items()}
        params["g_id"] = run_id
        if lease is not None:
            params["g_owner"], params["g_generation"] = lease.owner, lease.generation
        with self._statement() as t:
            row = t.execute(q, params).mappings().first()
            if row is not None and fields.keys() & {"status", "cancel_requested"}:
                self._notify(t)  # begun, requeued, ended, or to be stopped: a slot taken or freed, or a stop to make
        return _row(row) if row is not None else None

    # -- wake-ups: PostgreSQL's LISTEN/NOTIFY --------------------------------------------------------------
    def _notify(self, t: Connection) -> None:
        if self.dialect == "postgresql":
            t.execute(text("SELECT pg_notify(:channel, '')"), {"channel": CHANNEL})

    def listen(self, wake: Callable[[], None]) -> Callable[[], None]:
        """``wake()`` — from a thread of its own — whenever any replica queues a run or changes one's status (on
        PostgreSQL: LISTEN/NOTIFY, so no replica waits for its next poll to see it); what it returns stops that.
        On SQLite nothing: one replica, which wakes itself."""
        if self.dialect != "postgresql":
            return lambda: None
        import psycopg

        conninfo = self._engine.url.set(drivername="postgresql").render_as_string(hide_password=False)
        stop = threading.Event()

        def listening() -> None:
            while not stop.is_set():
                try:
                    with psycopg.connect(conninfo, autocommit=True) as c:
                        c.execute(f"LISTEN {CHANNEL}")
                        wake()  # what was notified while this was not listening
                        while not stop.is_set():
                            for _ in c.notifies(timeout=0.5, stop_after=1):
                                wake()
                except psycopg.Error:
                    stop.wait(1.0)  # the database is away: the passes poll meanwhile

        thread = threading.Thread(target=listening, name="flower-registry-listen", daemon=True)
        thread.start()

        def close() -> None:
            stop.set()
            thread.join(2)

        return close

    # -- webhook deliveries (service.webhooks) ---------------------------------------------------
    def add_delivery(self, d: Delivery) -> bool:
        """Queue one delivery; False when one of that id is there already (an event read twice is sent once)."""
        q = dialects.insert(deliveries, self.dialect).values(
            id=d.id, tenant=d.tenant, run=d.run, event=d.event, body=d.body, created=d.created, state=d.state,
            next_try=d.next_try).on_conflict_do_nothing(index_elements=[deliveries.c.id]).returning(deliveries.c.id)
        with self._statement() as t:  # RETURNING: SQLAlchemy's psycopg rowcount is -1 for an INSERT … ON CONFLICT
            return t.execute(q).first() is not None

    def deliveries(self, *, tenant: str | None = None, state: DeliveryState | None = None,
                   limit: int | None = None, oldest_first: bool = False) -> _Deliveries:
        where: list[ColumnElement[bool]] = []
        if tenant is not None:
            where.append(deliveries.c.tenant == tenant)
        if state is not None:
            where.append(deliveries.c.state == state)
        q = _ordered(select(deliveries).where(*where), self._deliveries_order, oldest_first, limit)
        return [msgspec.convert({**_plain(r), "body": bytes(r["body"])}, Delivery) for r in self._rows(q)]

    def claim_delivery(self, d: Delivery, *, now: float, until: float) -> bool:
        """Take ``d`` to send one try of it, as read: still pending, due (``next_try <= now``), and tried as often as
        ``d`` says — its next try moved to ``until`` meanwhile, so no other replica sends it until then (one that
        dies while sending leaves it due again at ``until``). ``until`` is the claim: ``delivery_tried`` stores the
        try's outcome only while it is still the delivery's. False when another took it first or it is not due."""
        c = deliveries.c
        return self._write(update(deliveries).where(
            c.id == d.id, c.state == "pending", c.attempts == d.attempts, c.next_try <= now).values(next_try=until)) > 0

    def delivery_tried(self, d: Delivery, *, claim: float) -> bool:
        """Store how a try went (``d`` as it left it, this try counted in ``attempts``): its state, attempts, last
        status and error, next try, end — only while the try's claim (the ``until`` it was claimed with) is still
        the delivery's. False, and nothing written, when it is not: the sender stalled past its claim, and another
        replica has claimed the delivery since (its outcome is that one's to store)."""
        c = deliveries.c
        return self._write(update(deliveries).where(
            c.id == d.id, c.state == "pending", c.attempts == d.attempts - 1, c.next_try == claim).values(
            state=d.state, attempts=d.attempts, last_status=d.last_status, last_error=d.last_error,
            next_try=d.next_try, ended=d.ended)) > 0

    def pending_pushes(self) -> _Runs:
        """Runs whose push was under way when the service stopped."""
        q = select(runs).where(runs.c.push.is_not(None),
                               dialects.json_text(runs.c.push, "state", self.dialect) == "pending")
        return [_row(r) for r in self._rows(_ordered(q, dialects.insertion_order(runs, self.dialect), True, None))]


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


@functools.cache
def _take(dialect: dialects.Dialect) -> UpdateBase:
    """``Registry.take``'s statement, built once (bound: run_id, owner, now, expires)."""
    owner, expires = bindparam("owner", type_=Text()), bindparam("expires", type_=Float())
    new = dialects.insert(leases, dialect).values(run_id=bindparam("run_id"), owner=owner, generation=1,
                                                  expires=expires)
    return new.on_conflict_do_update(
        index_elements=[leases.c.run_id], set_={"owner": owner, "generation": leases.c.generation + 1,
                                                "expires": expires},
        where=or_(leases.c.expires < bindparam("now"), leases.c.owner == owner)).returning(*leases.c)


@functools.lru_cache(maxsize=256)
def _guarded_update(frm: tuple[RunStatus, ...], leased: bool, fields: tuple[str, ...]) -> UpdateBase:
    """``Registry._returning``'s statement for one shape of write, built once: its values are bound parameters
    (``g_id``, ``g_owner``, ``g_generation``, ``v_<field>``), so a write costs its execution, not its building."""
    statuses = [literal_column(f"'{x}'", Text()) for x in frm if x in STATUSES]  # ours, as literals: no IN list to expand
    q = update(runs).where(runs.c.id == bindparam("g_id"), runs.c.status.in_(statuses))
    if leased:
        q = q.where(exists().where(leases.c.run_id == bindparam("g_id"), leases.c.owner == bindparam("g_owner"),
                                   leases.c.generation == bindparam("g_generation")))
    return q.values({k: bindparam(f"v_{k}") for k in fields}).returning(*runs.c)


def _stored(field: str, value: Any) -> Any:
    """A Run field's value as its column holds it: structs and dicts as JSON text, the flag as 0/1."""
    if isinstance(value, msgspec.Struct):
        return msgspec.json.encode(value).decode()
    if field in ("options", "diffstat") and value is not None:
        return json.dumps(value, ensure_ascii=False)
    if field == "cancel_requested":
        return int(bool(value))
    return value


def _ordered(q: Select[Any], order: Sequence[ColumnElement[Any]], oldest_first: bool,
             limit: int | None) -> Select[Any]:
    q = q.order_by(*(c.asc() if oldest_first else c.desc() for c in order))
    return q if limit is None else q.limit(int(limit))


def open_registry(config: ServiceConfig) -> Registry:
    """The registry the config names: PostgreSQL when ``database_url`` is set, else the SQLite file in data_dir."""
    if config.database_url:
        return Registry.postgres(config.database_url)
    return Registry(config.db_path)
