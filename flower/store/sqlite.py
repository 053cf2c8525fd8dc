"""SQLite session store: the SDK's SessionStore protocol on one local file.

Why SQLite: a run directory must survive process restarts and be shareable by two
``flower`` processes at once (WAL, busy timeout, short IMMEDIATE transactions), with no
server to operate. Rows are written once and never rewritten — the trimming and pruning
subclasses reshape *copies* at ``load()``.
"""

from __future__ import annotations

import gc
import secrets
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import anyio.to_thread
import msgspec
from claude_agent_sdk.types import (
    SessionKey,
    SessionListSubkeysKey,
    SessionStore,
    SessionStoreEntry,
    SessionStoreListEntry,
    SessionSummaryEntry,
)

from flower.core.usage import context_of
from flower.store.summary import fold_summary

__all__ = ["SqliteSessionStore", "store_key"]

T = TypeVar("T")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (
    id          INTEGER PRIMARY KEY,
    key         TEXT NOT NULL UNIQUE,
    project_key TEXT NOT NULL,
    session_id  TEXT NOT NULL,
    subpath     TEXT NOT NULL,
    mtime       INTEGER NOT NULL,
    stamp       INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS meta_by_session ON meta(project_key, session_id);
CREATE TABLE IF NOT EXISTS entries (
    id      INTEGER PRIMARY KEY,
    key_id  INTEGER NOT NULL,
    uuid    TEXT,
    data    BLOB NOT NULL
);
CREATE INDEX IF NOT EXISTS entries_by_key ON entries(key_id, id);
CREATE TABLE IF NOT EXISTS summaries (
    project_key TEXT NOT NULL,
    session_id  TEXT NOT NULL,
    mtime       INTEGER NOT NULL,
    data        BLOB NOT NULL,
    PRIMARY KEY (project_key, session_id)
);
"""

_encode = msgspec.json.Encoder().encode
_decode = msgspec.json.Decoder().decode


@dataclass
class _Seen:
    """One key as ``append`` last left it: uuids stored, summary (main key), the mtime and stamp it wrote.

    No unique index on uuid: random uuids land on random index pages, and writing those
    pages back cost a third of an append. The set is exact while ``stamp`` is the stored one:
    a random write stamp, not the clock, which repeats after a delete and a re-append within
    one millisecond (SQLite reuses the row id too) and would make a stale set look current.
    """

    key_id: int
    mtime: int
    stamp: int
    uuids: set[str]
    summary: SessionSummaryEntry | None


@contextmanager
def _gc_paused() -> Iterator[None]:
    """Pause the cyclic GC while decoding a whole session.

    Decoding 10 000 entries allocates ~10^5 dicts and lists, which triggers full
    collections that scan the entire heap: measured 2-4x the decode time, erratically.
    Decoded JSON holds no cycles, so nothing is lost by collecting later.
    """
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


@contextmanager
def _immediate(conn: sqlite3.Connection) -> Iterator[None]:
    """One short write transaction, locked from its start so two processes queue instead of deadlocking."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")


def _key_id(conn: sqlite3.Connection, k: str) -> int | None:
    row = conn.execute("SELECT id FROM meta WHERE key = ?", (k,)).fetchone()
    return row[0] if row else None


def store_key(key: SessionKey | SessionListSubkeysKey) -> str:
    """``project_key/session_id[/subpath]`` — the same composite key the SDK's in-memory store uses."""
    sub = key.get("subpath")
    base = f"{key['project_key']}/{key['session_id']}"
    return f"{base}/{sub}" if sub else base


class SqliteSessionStore(SessionStore):
    """Durable ``SessionStore`` with every optional method; safe for two processes on one file.

    Tables: ``entries`` (one row per transcript line, in append order; lines with a
    ``uuid`` are unique per key, duplicates ignored), ``meta`` (per key: the parts and the
    storage mtime), ``summaries`` (the SDK's ``fold_session_summary`` sidecar). The
    protocol's methods run in a worker thread so a 10 000-line load never stalls the event
    loop; ``projects``, ``has_session`` and ``last_context`` are plain synchronous calls
    for callers outside a loop (a ``Runtime`` deciding whether to resume).
    """

    busy_timeout_ms = 10_000

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()
        self._conn: sqlite3.Connection | None = None
        self._pid = 0
        self._last_mtime = 0
        self._seen: dict[str, _Seen] = {}  # store_key -> what append() trusts while the key's stamp is its own

    # -- connection -----------------------------------------------------------
    def _connect(self) -> sqlite3.Connection:
        """One connection per process (re-opened after fork), schema created on first use."""
        if self._conn is not None and self._pid == os.getpid():
            return self._conn
        self.path.parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(
            self.path, timeout=self.busy_timeout_ms / 1000, isolation_level=None, check_same_thread=False
        )
        conn.execute(f"PRAGMA busy_timeout={self.busy_timeout_ms}")
        conn.execute("PRAGMA page_size=16384")  # new files only: transcript lines are 1-10 KB
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=NORMAL")
        conn.executescript(_SCHEMA)
        if "stamp" not in {r[1] for r in conn.execute("PRAGMA table_info(meta)")}:  # a file made before stamps
            conn.execute("ALTER TABLE meta ADD COLUMN stamp INTEGER NOT NULL DEFAULT 0")
        self._conn, self._pid = conn, os.getpid()
        return conn

    def close(self) -> None:
        """Close the connection. Optional (it is also closed with the store); the store reopens on next use."""
        with self._lock:
            if self._conn is not None and self._pid == os.getpid():
                self._conn.close()
            self._conn = None

    def _sync(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        with self._lock:
            return fn(self._connect())

    async def _run(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        return await anyio.to_thread.run_sync(self._sync, fn)

    async def _rows(self, sql: str, *params: object) -> list[tuple[Any, ...]]:
        return await self._run(lambda c: c.execute(sql, params).fetchall())

    def _next_mtime(self, floor: int = 0) -> int:
        """Storage write time in epoch ms, strictly increasing across calls.

        ``list_sessions`` and the summary sidecar read this one clock; if they did not,
        the SDK's staleness fast path (summary.mtime < session mtime) would misfire.
        ``floor`` is the stored mtime, so the order also holds across processes.
        """
        now = max(int(time.time() * 1000), self._last_mtime + 1, floor + 1)
        self._last_mtime = now
        return now

    # -- required -------------------------------------------------------------
    async def append(self, key: SessionKey, entries: list[SessionStoreEntry]) -> None:
        """Append in order; a ``uuid`` already stored under this key, or repeated in the batch, is skipped.

        A batch that adds nothing (a replay) leaves the mtime and the summary alone. Only
        the main transcript (no subpath) is folded into the summary sidecar.

        The uuids already stored and the summary are kept in memory per key and trusted
        while the key's stored write stamp is the one this store last wrote (every append
        draws a new one, whichever process writes): no uuid index to update, no summary to re-read.
        """
        if not entries:
            return
        k = store_key(key)
        pk, sid, sub = key["project_key"], key["session_id"], key.get("subpath") or ""
        uuids = [u if isinstance(u := e.get("uuid"), str) else None for e in entries]

        def write(conn: sqlite3.Connection) -> None:
            blobs = [_encode(e) for e in entries]  # before the transaction, so the file stays locked briefly
            with _immediate(conn):
                row = conn.execute("SELECT id, mtime, stamp FROM meta WHERE key = ?", (k,)).fetchone()
                if row is None:
                    key_id = conn.execute(
                        "INSERT INTO meta(key, project_key, session_id, subpath, mtime) VALUES (?, ?, ?, ?, 0)",
                        (k, pk, sid, sub),
                    ).lastrowid
                    assert key_id is not None
                    seen = _Seen(key_id, 0, 0, set(), None)
                else:
                    seen = self._seen.get(k) or _Seen(row[0], -1, -1, set(), None)
                    if (seen.key_id, seen.stamp) != (row[0], row[2]):  # first write here, or another wrote since
                        seen = self._reread(conn, row[0], row[1], row[2], pk, sid, sub)
                self._seen.pop(k, None)  # until the commit: a failed write must not leave it trusted
                stored = seen.uuids
                fresh: list[SessionStoreEntry] = []
                rows: list[tuple[int, str | None, bytes]] = []
                for e, u, blob in zip(entries, uuids, blobs):
                    if u is not None:
                        if u in stored:
                            continue
                        stored.add(u)
                    fresh.append(e)
                    rows.append((seen.key_id, u, blob))
                if not rows:  # a replayed batch: nothing new, nothing moves
                    self._seen[k] = seen
                    return
                conn.executemany("INSERT OR IGNORE INTO entries(key_id, uuid, data) VALUES (?, ?, ?)", rows)
                floor = max(seen.mtime, seen.summary["mtime"] if seen.summary else 0)
                mtime, stamp = self._next_mtime(floor), secrets.randbits(62) + 1
                conn.execute("UPDATE meta SET mtime = ?, stamp = ? WHERE id = ?", (mtime, stamp, seen.key_id))
                if not sub:
                    folded = fold_summary(seen.summary, key, fresh)
                    folded["mtime"] = mtime
                    conn.execute(
                        "INSERT OR REPLACE INTO summaries(project_key, session_id, mtime, data) VALUES (?, ?, ?, ?)",
                        (pk, sid, mtime, _encode(folded["data"])),
                    )
                    seen.summary = folded
            seen.mtime, seen.stamp = mtime, stamp
            self._seen[k] = seen

        await self._run(write)

    def _reread(
        self, conn: sqlite3.Connection, key_id: int, mtime: int, stamp: int, pk: str, sid: str, sub: str
    ) -> _Seen:
        """What ``append`` keeps of a key, read from the file: its uuids and (main key) its summary."""
        uuids = {r[0] for r in conn.execute(
            "SELECT uuid FROM entries WHERE key_id = ? AND uuid IS NOT NULL", (key_id,))}
        summary: SessionSummaryEntry | None = None
        if not sub:
            srow = conn.execute(
                "SELECT mtime, data FROM summaries WHERE project_key = ? AND session_id = ?", (pk, sid)
            ).fetchone()
            if srow:
                summary = {"session_id": sid, "mtime": srow[0], "data": _decode(srow[1])}
        return _Seen(key_id, mtime, stamp, uuids, summary)

    # -- synchronous lookups (no event loop needed; cheap) ---------------------
    def projects(self) -> list[str]:
        """The ``project_key``s actually present. The SDK derives one from the cwd: check, don't guess."""
        return self._sync(lambda c: [r[0] for r in c.execute(
            "SELECT DISTINCT project_key FROM meta ORDER BY project_key")])

    def has_session(self, project_key: str, session_id: str) -> bool:
        """Is there a main transcript for this session under this project, with a conversation in it? Reads one
        meta row and the transcript's first entries up to its first user message.

        Resuming an id that is not here only fails after the CLI has started; ask first. A transcript of
        bookkeeping lines alone — the CLI's process killed before its first message reached the store — is no
        session to resume: the CLI answers "No conversation found" to it, every time it is tried.
        """
        k = store_key({"project_key": project_key, "session_id": session_id})

        def look(c: sqlite3.Connection) -> bool:
            kid = _key_id(c, k)
            if kid is None:
                return False
            for (data,) in c.execute("SELECT data FROM entries WHERE key_id = ? ORDER BY id LIMIT 200", (kid,)):
                if b'"user"' in data and _decode(data).get("type") == "user":
                    return True
            return False

        return self._sync(look)

    def last_context(self, project_key: str, session_id: str, *, scan: int = 60) -> int:
        """How big the context the model saw on the session's last turn was, in tokens; 0 if unknown.

        Reads only the last ``scan`` entries of the main transcript, newest first, and
        takes the first real assistant message's usage as ``context_of`` counts it (input
        alone badly undercounts once caching is on). Synthetic messages (API errors) are skipped.
        """
        k = store_key({"project_key": project_key, "session_id": session_id})

        def read(conn: sqlite3.Connection) -> list[bytes]:
            kid = _key_id(conn, k)
            return [] if kid is None else [r[0] for r in conn.execute(
                "SELECT data FROM entries WHERE key_id = ? ORDER BY id DESC LIMIT ?", (kid, max(0, scan)))]

        for data in self._sync(read):
            if b'"assistant"' not in data:
                continue
            e = _decode(data)
            msg = e.get("message")
            if e.get("type") != "assistant" or not isinstance(msg, dict) or e.get("isApiErrorMessage") \
                    or msg.get("model") == "<synthetic>" or not isinstance(msg.get("usage"), dict):
                continue
            return context_of(msg["usage"])
        return 0

    async def load(self, key: SessionKey) -> list[SessionStoreEntry] | None:
        """The key's entries in append order; ``None`` when the key has none."""
        k = store_key(key)

        def read(conn: sqlite3.Connection) -> list[SessionStoreEntry] | None:
            kid = _key_id(conn, k)
            if kid is None:
                return None
            with _gc_paused():  # decoded while fetched: no second list of 10 000 blobs held at once
                return [_decode(d) for (d,) in conn.execute(
                    "SELECT data FROM entries WHERE key_id = ? ORDER BY id", (kid,))]

        return await self._run(read)

    # -- optional -------------------------------------------------------------
    async def list_sessions(self, project_key: str) -> list[SessionStoreListEntry]:
        rows = await self._rows("SELECT session_id, mtime FROM meta WHERE project_key = ? AND subpath = ''",
                                project_key)
        return [{"session_id": s, "mtime": m} for s, m in rows]

    async def list_session_summaries(self, project_key: str) -> list[SessionSummaryEntry]:
        rows = await self._rows("SELECT session_id, mtime, data FROM summaries WHERE project_key = ?", project_key)
        return [{"session_id": s, "mtime": m, "data": _decode(d)} for s, m, d in rows]

    async def delete(self, key: SessionKey) -> None:
        """Delete one key; a main key cascades to its subpaths and its summary."""
        k = store_key(key)
        main = not key.get("subpath")
        pk, sid = key["project_key"], key["session_id"]

        def write(conn: sqlite3.Connection) -> None:
            with _immediate(conn):
                if main:
                    ids = conn.execute(
                        "SELECT id FROM meta WHERE key = ? OR (project_key = ? AND session_id = ? AND subpath != '')",
                        (k, pk, sid),
                    ).fetchall()
                    conn.execute("DELETE FROM summaries WHERE project_key = ? AND session_id = ?", (pk, sid))
                else:
                    ids = conn.execute("SELECT id FROM meta WHERE key = ?", (k,)).fetchall()
                conn.executemany("DELETE FROM entries WHERE key_id = ?", ids)
                conn.executemany("DELETE FROM meta WHERE id = ?", ids)
            gone = {i for (i,) in ids}
            for name in [n for n, s in self._seen.items() if s.key_id in gone]:
                del self._seen[name]

        await self._run(write)

    async def list_subkeys(self, key: SessionListSubkeysKey) -> list[str]:
        rows = await self._rows(
            "SELECT subpath FROM meta WHERE project_key = ? AND session_id = ? AND subpath != '' ORDER BY subpath",
            key["project_key"], key["session_id"],
        )
        return [r[0] for r in rows]

    def __del__(self) -> None:
        try:
            self.close()
        except (AttributeError, sqlite3.Error):  # a half-built store, or interpreter shutdown
            pass

