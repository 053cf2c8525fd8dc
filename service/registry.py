"""The runs registry: one SQLite file (WAL) under data_dir; every state a run goes through.

    queued → starting → running → succeeded | failed | aborted | killed | cancelled
    queued → cancelled;  starting → failed (preparation failed)

Transitions are guarded in SQL (``WHERE status IN (...)``) so two writers never both win.
The service may stop at any point: the row says where a run was, and the scheduler picks
it up from there (``event_offset`` / ``event_seq``: how far its events.jsonl was read).
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any, Iterable

import msgspec

from .backup import check_registry

__all__ = ["Registry", "Run", "ACTIVE", "TERMINAL", "STATUSES"]

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
"""
_VERSION = 2
# Columns added since version 1 (an older file gains them): what the model gateway measures, disk and tombstones.
_ADDED = {"disk_bytes": "INTEGER", "deleted": "REAL",
          "input_tokens": "INTEGER NOT NULL DEFAULT 0", "output_tokens": "INTEGER NOT NULL DEFAULT 0",
          "cache_write_tokens": "INTEGER NOT NULL DEFAULT 0", "cache_read_tokens": "INTEGER NOT NULL DEFAULT 0",
          "claimed_cost_usd": "REAL NOT NULL DEFAULT 0", "token_sha256": "TEXT", "folder": "TEXT"}


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

    @property
    def terminal(self) -> bool:
        return self.status in TERMINAL



_COLUMNS = Run.__struct_fields__


def _row(r: sqlite3.Row) -> Run:
    d = dict(r)
    d["options"] = json.loads(d["options"] or "{}")
    d["diffstat"] = json.loads(d["diffstat"]) if d["diffstat"] else None
    d["cancel_requested"] = bool(d["cancel_requested"])
    return msgspec.convert(d, Run)


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
        with self._lock:
            version = self._db.execute("PRAGMA user_version").fetchone()[0]
            if version > _VERSION:
                raise RuntimeError(f"registry {self.path} was written by a newer service (schema {version}); "
                                   "upgrade the service or point data_dir elsewhere")
            self._db.executescript(_SCHEMA)
            have = {r[1] for r in self._db.execute("PRAGMA table_info(runs)")}
            for name, kind in _ADDED.items():
                if name not in have:
                    self._db.execute(f"ALTER TABLE runs ADD COLUMN {name} {kind}")
            self._db.execute(f"PRAGMA user_version={_VERSION}")

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
        sql = "SELECT * FROM runs" + (" WHERE " + " AND ".join(where) if where else "")
        sql += f" ORDER BY created {'ASC' if oldest_first else 'DESC'}, rowid {'ASC' if oldest_first else 'DESC'}"
        if limit is not None:
            sql += " LIMIT ?"
            args.append(int(limit))
        with self._lock:
            rows = self._db.execute(sql, args).fetchall()
        return [_row(r) for r in rows]

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
            if k in ("options", "diffstat") and v is not None:
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
