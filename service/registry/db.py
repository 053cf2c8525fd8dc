"""The one database object every table of the registry shares: the engine and its dialect, how one statement or
one transaction runs (on SQLite one connection behind one lock, on PostgreSQL a pool), PostgreSQL's LISTEN/NOTIFY,
and what opening a database does — check the SQLite file is sound and ours, migrate it, or refuse it.

Every call is one short transaction and every guard is in the SQL (``WHERE status IN …``, ``ON CONFLICT``), so
two writers — two threads, or two replicas on one PostgreSQL — never both win.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from sqlalchemy import Connection, Engine, RowMapping, Select, text
from sqlalchemy.exc import OperationalError
from sqlalchemy.sql.dml import UpdateBase

from ..errors import RegistryDamaged, RegistryNewer, RegistryUnreachable
from . import dialects
from .backup import check_registry
from .integrity import foreign
from .migrate import migrate
from .users import hold

__all__ = ["Database", "CHANNEL", "SCHEMA"]

CHANNEL = "flower_runs"  # PostgreSQL's NOTIFY channel: a run queued, or its status changed
SCHEMA = 9  # SQLite's PRAGMA user_version this code writes (service/registry/migrations/versions/v0007_schedules.py)

_NO_LOCK = contextlib.nullcontext()  # PostgreSQL keeps its writers apart itself: no lock in the process


class Database:
    """Thread-safe; made by ``sqlite`` or ``postgres``, never directly."""

    path: Path | None
    """The SQLite file (None on PostgreSQL)."""
    where: str
    """The file, or the database and host: for sentences (never a password)."""
    dialect: dialects.Dialect
    revision: str
    """The migration the database is at (``registry.migrate``)."""
    migrated_from: str | None
    """Where this open found it, when this open migrated it (None: it was at ``revision`` already)."""

    def __init__(self, engine: Engine, dialect: dialects.Dialect, lock: contextlib.AbstractContextManager[object],
                 *, path: Path | None, where: str) -> None:
        self.engine, self.dialect, self._lock, self.path, self.where = engine, dialect, lock, path, where
        # One statement needs no transaction around it: on PostgreSQL each commits itself, so a call is one round
        # trip, not BEGIN, it, COMMIT (SQLite's transactions are in-process: begun as ever).
        self._one = engine.execution_options(isolation_level="AUTOCOMMIT") if dialect == "postgresql" else engine
        self._using: int | None = None  # SQLite: the shared lock that tells a restore this process uses the file

    @classmethod
    def sqlite(cls, path: str | Path) -> Database:
        """The SQLite file at ``path`` (made 0600 in a 0700 folder), checked sound and ours, migrated."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        using = hold(path)  # before the file is read: a restore under way is waited for, and refuses while held
        try:
            check_registry(path)  # a truncated or corrupt file stops the service with the way to restore it
            os.close(os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600))  # SQLite gives -wal/-shm its mode
        except BaseException:
            os.close(using)
            raise
        self = cls(dialects.sqlite_engine(path), "sqlite", threading.RLock(), path=path, where=str(path))
        self._using = using
        try:
            with self._lock:
                self._refuse_sqlite(path)
                self.migrated_from, self.revision = migrate(self.engine, where=self.where)
        except BaseException:
            self.close()
            raise
        return self

    @classmethod
    def postgres(cls, url: str, *, lock_timeout_s: float = 60.0) -> Database:
        """The PostgreSQL database ``url`` names, migrated (once, whichever replica is first)."""
        parsed = dialects.postgres_url(url)
        self = cls(dialects.postgres_engine(parsed), "postgresql", _NO_LOCK, path=None,
                   where=dialects.describe(parsed))
        try:
            with self.engine.connect():
                pass
        except OperationalError as e:
            self.engine.dispose()
            reason = " ".join(str(e.orig or e).split())
            raise RegistryUnreachable(
                f"the registry's {self.where} cannot be reached ({reason}): check database_url and that the "
                "server is up", host=parsed.host or str(parsed.query.get("host") or ""),
                database=parsed.database or "") from None
        try:
            self.migrated_from, self.revision = migrate(self.engine, where=self.where, lock_timeout_s=lock_timeout_s)
        except BaseException:
            self.engine.dispose()
            raise
        return self

    def _refuse_sqlite(self, path: Path) -> None:
        """A file a newer service wrote, or one holding what ours does not, is refused before anything is changed."""
        with self.engine.connect() as c:
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
            self.engine.dispose()
            if self._using is not None:
                os.close(self._using)
                self._using = None

    # -- the ways a statement runs -------------------------------------------------------------
    def rows(self, statement: Select[Any]) -> Sequence[RowMapping]:
        with self._lock, self._one.connect() as c:
            return c.execute(statement).mappings().all()

    def scalar(self, statement: Select[Any]) -> Any:
        """The one value ``statement`` selects (a count), read in a transaction of its own."""
        with self._lock, self.engine.connect() as c:
            return c.execute(statement).scalar_one()

    def write(self, statement: UpdateBase) -> int:
        """One statement, committed; the number of rows it changed."""
        with self.statement() as c:
            return int(c.execute(statement).rowcount)

    @contextlib.contextmanager
    def statement(self) -> Iterator[Connection]:
        """For one write statement (and a NOTIFY after it): committed by itself on PostgreSQL."""
        with self._lock, self._one.begin() as c:
            yield c

    @contextlib.contextmanager
    def transaction(self) -> Iterator[Connection]:
        with self._lock, self.engine.begin() as c:
            yield c

    # -- wake-ups: PostgreSQL's LISTEN/NOTIFY --------------------------------------------------------------
    def notify(self, t: Connection) -> None:
        """Within ``t``: every listening replica is woken (a run queued, or its status changed)."""
        if self.dialect == "postgresql":
            t.execute(text("SELECT pg_notify(:channel, '')"), {"channel": CHANNEL})

    def listen(self, wake: Callable[[], None]) -> Callable[[], None]:
        """``wake()`` — from a thread of its own — whenever any replica queues a run or changes one's status (on
        PostgreSQL: LISTEN/NOTIFY, so no replica waits for its next poll to see it); what it returns stops that.
        On SQLite nothing: one replica, which wakes itself."""
        if self.dialect != "postgresql":
            return lambda: None
        import psycopg

        conninfo = self.engine.url.set(drivername="postgresql").render_as_string(hide_password=False)
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
