"""The runs registry: one SQLite file (WAL) under data_dir; every state a run goes through.

    queued → starting → running → succeeded | failed | aborted | killed | cancelled
    queued → cancelled;  starting → failed (preparation failed)

Transitions are guarded in SQL (``WHERE status IN (...)``) so two writers never both win.
The service may stop at any point: the row says where a run was, and the scheduler picks
it up from there (``event_offset`` / ``event_seq``: how far its events.jsonl was read). Beside the runs: each
tenant's spend per day (``spend``) and its webhook deliveries (``deliveries``, ``service.webhooks``).

Nothing in the file is believed about the host because it is there: a file holding anything a registry of ours
does not (a trigger, a view, another table or index, a column defined otherwise) is refused at open and at
``restore`` (``foreign``), and so is a row that names what is not its own. A run's folder is its id, or the
warm slot (``warm-<hex>``, ``sandbox.pool``) it claimed — no run id looks like one, and no two rows name the same
slot — so a DELETE or a read of one row never reaches another run's files; a local handle names its own row's
folder, and the backend signals a process only when it carries its run's marker and start time.
"""

from __future__ import annotations

import json
import os
import re
import sqlite3
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Iterable, Literal

import msgspec

from sandbox.backends.local import folder_of
from sandbox.layout import valid_run_id
from sandbox.pool import SLOT_PREFIX

from .backup import RegistryDamaged, check_registry

__all__ = ["Registry", "Run", "Push", "Delivery", "ACTIVE", "TERMINAL", "STATUSES", "foreign"]

STATUSES = ("queued", "starting", "running", "succeeded", "failed", "aborted", "cancelled", "killed")
ACTIVE = ("starting", "running")
TERMINAL = ("succeeded", "failed", "aborted", "cancelled", "killed")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
    id              TEXT PRIMARY KEY,
    tenant          TEXT NOT NULL,
    ask             TEXT NOT NULL,
    options         TEXT NOT NULL DEFAULT '{}',
    status          TEXT NOT NULL,
    repo            TEXT NOT NULL DEFAULT '',
    handle          TEXT,
    branch          TEXT,
    base            TEXT,
    commit_sha      TEXT,
    created         REAL NOT NULL,
    started         REAL,
    ended           REAL,
    cost_usd        REAL NOT NULL DEFAULT 0,
    error           TEXT,
    step            TEXT,
    diffstat        TEXT,
    event_offset    INTEGER NOT NULL DEFAULT 0,
    event_seq       INTEGER NOT NULL DEFAULT 0,
    cancel_requested INTEGER NOT NULL DEFAULT 0,
    disk_bytes      INTEGER,
    deleted         REAL
);
CREATE INDEX IF NOT EXISTS runs_tenant ON runs (tenant, created);
CREATE INDEX IF NOT EXISTS runs_status ON runs (status, created);
CREATE TABLE IF NOT EXISTS spend (
    tenant          TEXT NOT NULL,
    day             TEXT NOT NULL,
    cost_usd        REAL NOT NULL DEFAULT 0,
    input_tokens    INTEGER NOT NULL DEFAULT 0,
    output_tokens   INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (tenant, day)
);
CREATE TABLE IF NOT EXISTS deliveries (
    id              TEXT PRIMARY KEY,
    tenant          TEXT NOT NULL,
    run             TEXT NOT NULL,
    event           TEXT NOT NULL,
    body            BLOB NOT NULL,
    created         REAL NOT NULL,
    state           TEXT NOT NULL,
    attempts        INTEGER NOT NULL DEFAULT 0,
    last_status     INTEGER,
    last_error      TEXT,
    next_try        REAL,
    ended           REAL
);
CREATE INDEX IF NOT EXISTS deliveries_tenant ON deliveries (tenant, created);
CREATE INDEX IF NOT EXISTS deliveries_state ON deliveries (state, created);
"""
_VERSION = 3
# Columns added since version 1 (an older file gains them): what the model gateway measures, disk and tombstones.
_ADDED = {"disk_bytes": "INTEGER", "deleted": "REAL",
          "input_tokens": "INTEGER NOT NULL DEFAULT 0", "output_tokens": "INTEGER NOT NULL DEFAULT 0",
          "cache_write_tokens": "INTEGER NOT NULL DEFAULT 0", "cache_read_tokens": "INTEGER NOT NULL DEFAULT 0",
          "claimed_cost_usd": "REAL NOT NULL DEFAULT 0", "token_sha256": "TEXT", "folder": "TEXT", "push": "TEXT"}
# After the columns above exist: no two runs name one folder (a warm slot is claimed once).
_INDEXES = "CREATE UNIQUE INDEX IF NOT EXISTS runs_folder ON runs (folder);"
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


class Run(msgspec.Struct, kw_only=True):
    id: str
    tenant: str
    ask: str
    options: dict[str, Any]
    status: str
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


def _convert(r: sqlite3.Row) -> Run:
    d = dict(r)
    d["options"] = json.loads(d["options"] or "{}")
    d["diffstat"] = json.loads(d["diffstat"]) if d["diffstat"] else None
    d["push"] = json.loads(d["push"]) if d.get("push") else None
    d["cancel_requested"] = bool(d["cancel_requested"])
    return msgspec.convert(d, Run)


def _row(r: sqlite3.Row) -> Run:
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


def _migrate(db: sqlite3.Connection) -> None:
    """Our tables, indexes and columns, added where missing (a fresh file, or one an older service wrote)."""
    db.executescript(_SCHEMA)
    have = {r[1] for r in db.execute("PRAGMA table_info(runs)")}
    for name, kind in _ADDED.items():
        if name not in have:
            db.execute(f"ALTER TABLE runs ADD COLUMN {name} {kind}")
    db.executescript(_INDEXES)
    db.execute(f"PRAGMA user_version={_VERSION}")


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
    fresh = sqlite3.connect(":memory:")
    try:
        _migrate(fresh)
        ours = {r[1]: (r[0], r[2], r[3]) for r in fresh.execute("SELECT type, name, tbl_name, sql FROM sqlite_master")}
    finally:
        fresh.close()
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
            extra = [d for d in _definitions(sql) if d not in _definitions(want)]
            if extra:
                return f"the table `{name}` with `{extra[0]}`, which is not how a registry defines it"
            missing = [d.split()[0] for d in _definitions(want) if d not in _definitions(sql)]
            if missing and (name != "runs" or any(column not in _ADDED for column in missing)):
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


class Registry:
    """Thread-safe (one connection, one lock); every call is one short transaction."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        check_registry(self.path)  # a truncated or corrupt file stops the service with the way to restore it
        os.close(os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600))  # SQLite gives -wal/-shm its mode
        self._lock = threading.RLock()
        self._db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None, timeout=30)
        self._db.row_factory = sqlite3.Row
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.execute("PRAGMA busy_timeout=30000")
        self._db.execute("PRAGMA trusted_schema=OFF")
        with self._lock:
            version = self._db.execute("PRAGMA user_version").fetchone()[0]
            if version > _VERSION:
                raise RuntimeError(f"registry {self.path} was written by a newer service (schema {version}); "
                                   "upgrade the service or point data_dir elsewhere")
            found = foreign(self._db)
            if found:
                self._db.close()
                raise RegistryDamaged(
                    f"the registry {self.path} holds {found}: this service did not write that, so it will not "
                    f"start on it; restore a backup with `python -m service restore <backup file>`, or move "
                    f"{self.path.name} aside to start with an empty registry")
            _migrate(self._db)

    def close(self) -> None:
        with self._lock:
            self._db.close()

    # -- reads -----------------------------------------------------------------------------
    def get(self, run_id: str, *, tenant: str | None = None) -> Run | None:
        sql, args = "SELECT * FROM runs WHERE id = ?", [run_id]
        if tenant is not None:
            sql += " AND tenant = ?"
            args.append(tenant)
        with self._lock:
            r = self._db.execute(sql, args).fetchone()
        return _row(r) if r else None

    def ids_starting(self, prefix: str, *, tenant: str, limit: int = 6) -> list[str]:
        """The ids of ``tenant``'s runs that start with ``prefix`` (at most ``limit``, oldest first): how a short
        id a person typed is resolved, never across tenants."""
        sql = "SELECT id FROM runs WHERE tenant = ? AND substr(id, 1, ?) = ? ORDER BY created, rowid LIMIT ?"
        with self._lock:
            rows = self._db.execute(sql, (tenant, len(prefix), prefix, int(limit))).fetchall()
        return [str(r[0]) for r in rows]

    def list(self, *, tenant: str | None = None, statuses: Iterable[str] | None = None,
             limit: int | None = None, oldest_first: bool = False, deleted: bool | None = None,
             ended_before: float | None = None) -> list[Run]:
        """``deleted``: None = tombstones too, False = without them, True = only them."""
        where, args = [], []  # type: list[str], list[Any]
        if deleted is not None:
            where.append("deleted IS NOT NULL" if deleted else "deleted IS NULL")
        if ended_before is not None:
            where.append("ended IS NOT NULL AND ended < ?")
            args.append(ended_before)
        if tenant is not None:
            where.append("tenant = ?")
            args.append(tenant)
        if statuses is not None:
            st = list(statuses)
            where.append(f"status IN ({','.join('?' * len(st))})")
            args.extend(st)
        return [_row(r) for r in self._select("runs", where, args, ("created", "rowid"), oldest_first, limit)]

    def _select(self, table: str, where: Sequence[str], args: Sequence[Any], order: tuple[str, ...],
                oldest_first: bool, limit: int | None) -> Sequence[sqlite3.Row]:
        """``SELECT *`` of ``table`` under the ``where`` clauses (ANDed), ordered, at most ``limit`` rows."""
        way = "ASC" if oldest_first else "DESC"
        sql = f"SELECT * FROM {table}" + (" WHERE " + " AND ".join(where) if where else "")
        sql += " ORDER BY " + ", ".join(f"{column} {way}" for column in order)
        if limit is not None:
            sql += " LIMIT ?"
            args = [*args, int(limit)]
        with self._lock:
            rows: Sequence[sqlite3.Row] = self._db.execute(sql, args).fetchall()
        return rows

    def count(self, *, statuses: Iterable[str], tenant: str | None = None) -> int:
        st = list(statuses)
        sql = f"SELECT COUNT(*) FROM runs WHERE status IN ({','.join('?' * len(st))})"
        args: list[Any] = st
        if tenant is not None:
            sql += " AND tenant = ?"
            args = [*st, tenant]
        with self._lock:
            return int(self._db.execute(sql, args).fetchone()[0])

    def folders(self) -> set[str]:
        """The folder names runs took from warm slots (their folders are theirs, not the pool's)."""
        with self._lock:
            return {r[0] for r in self._db.execute("SELECT folder FROM runs WHERE folder IS NOT NULL")}

    def counts(self) -> dict[tuple[str, str], int]:
        """(tenant, status) → number of runs."""
        with self._lock:
            rows = self._db.execute("SELECT tenant, status, COUNT(*) FROM runs GROUP BY tenant, status").fetchall()
        return {(r[0], r[1]): int(r[2]) for r in rows}

    # -- writes ----------------------------------------------------------------------------
    def create(self, *, id: str, tenant: str, ask: str, options: dict[str, Any], repo: str) -> Run:
        now = time.time()
        with self._lock:
            self._db.execute(
                "INSERT INTO runs (id, tenant, ask, options, status, repo, created) VALUES (?,?,?,?,?,?,?)",
                (id, tenant, ask, json.dumps(options, ensure_ascii=False), "queued", repo, now))
        run = self.get(id)
        assert run is not None
        return run

    def update(self, run_id: str, *, only_if: Iterable[str] | None = None, **fields: Any) -> bool:
        """Set fields; with ``only_if`` only when the status is one of those. True when a row changed."""
        bad = set(fields) - set(_COLUMNS)
        if bad:
            raise KeyError(f"unknown run fields: {sorted(bad)}")
        sets, args = [], []  # type: list[str], list[Any]
        for k, v in fields.items():
            if isinstance(v, msgspec.Struct):
                v = msgspec.json.encode(v).decode()
            elif k in ("options", "diffstat") and v is not None:
                v = json.dumps(v, ensure_ascii=False)
            elif k == "cancel_requested":
                v = int(bool(v))
            sets.append(f"{k} = ?")
            args.append(v)
        sql = f"UPDATE runs SET {', '.join(sets)} WHERE id = ?"
        args.append(run_id)
        if only_if is not None:
            st = list(only_if)
            sql += f" AND status IN ({','.join('?' * len(st))})"
            args.extend(st)
        with self._lock:
            cur = self._db.execute(sql, args)
            return cur.rowcount > 0

    def add_usage(self, run_id: str, tenant: str, day: str, *, input_tokens: int, output_tokens: int,
                  cache_write_tokens: int, cache_read_tokens: int, cost_usd: float) -> None:
        """What the gateway measured for one answer: onto the run and the tenant's day, in one transaction."""
        with self._lock:
            self._db.execute("BEGIN")
            try:
                self._db.execute(
                    "UPDATE runs SET input_tokens = input_tokens + ?, output_tokens = output_tokens + ?, "
                    "cache_write_tokens = cache_write_tokens + ?, cache_read_tokens = cache_read_tokens + ?, "
                    "cost_usd = cost_usd + ? WHERE id = ?",
                    (input_tokens, output_tokens, cache_write_tokens, cache_read_tokens, cost_usd, run_id))
                self._db.execute(
                    "INSERT INTO spend (tenant, day, cost_usd, input_tokens, output_tokens) VALUES (?,?,?,?,?) "
                    "ON CONFLICT (tenant, day) DO UPDATE SET cost_usd = cost_usd + excluded.cost_usd, "
                    "input_tokens = input_tokens + excluded.input_tokens, "
                    "output_tokens = output_tokens + excluded.output_tokens",
                    (tenant, day, cost_usd, input_tokens, output_tokens))
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise

    def spent(self, tenant: str, day: str) -> dict[str, float]:
        """The tenant's measured spend on ``day`` (YYYY-MM-DD, UTC)."""
        with self._lock:
            r = self._db.execute("SELECT cost_usd, input_tokens, output_tokens FROM spend WHERE tenant = ? AND day = ?",
                                 (tenant, day)).fetchone()
        return {"cost_usd": r[0] if r else 0.0, "input_tokens": r[1] if r else 0, "output_tokens": r[2] if r else 0}

    def transition(self, run_id: str, to: str, *, frm: Iterable[str], **fields: Any) -> bool:
        if to not in STATUSES:
            raise ValueError(f"unknown status {to!r}")
        return self.update(run_id, only_if=frm, status=to, **fields)

    # -- webhook deliveries (service.webhooks) ---------------------------------------------------
    def add_delivery(self, d: Delivery) -> bool:
        """Queue one delivery; False when one of that id is there already (an event read twice is sent once)."""
        with self._lock:
            cur = self._db.execute(
                "INSERT OR IGNORE INTO deliveries (id, tenant, run, event, body, created, state, next_try) "
                "VALUES (?,?,?,?,?,?,?,?)", (d.id, d.tenant, d.run, d.event, d.body, d.created, d.state, d.next_try))
            return cur.rowcount > 0

    def deliveries(self, *, tenant: str | None = None, state: DeliveryState | None = None,
                   limit: int | None = None, oldest_first: bool = False) -> _Deliveries:
        where, args = [], []  # type: list[str], list[Any]
        if tenant is not None:
            where.append("tenant = ?")
            args.append(tenant)
        if state is not None:
            where.append("state = ?")
            args.append(state)
        rows = self._select("deliveries", where, args, ("rowid",), oldest_first, limit)
        return [msgspec.convert(dict(r), Delivery) for r in rows]

    def delivery_tried(self, d: Delivery) -> None:
        """Store how a try went: its state, attempts, last status and error, next try, end."""
        with self._lock:
            self._db.execute(
                "UPDATE deliveries SET state = ?, attempts = ?, last_status = ?, last_error = ?, next_try = ?, "
                "ended = ? WHERE id = ?",
                (d.state, d.attempts, d.last_status, d.last_error, d.next_try, d.ended, d.id))

    def pending_pushes(self) -> _Runs:
        """Runs whose push was under way when the service stopped."""
        with self._lock:
            rows = self._db.execute("SELECT * FROM runs WHERE push IS NOT NULL AND "
                                    "json_extract(push, '$.state') = 'pending' ORDER BY rowid").fetchall()
        return [_row(r) for r in rows]
