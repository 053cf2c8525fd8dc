"""SqliteSessionStore specifics beyond the SDK contracts: idempotency, clock, two processes."""

from __future__ import annotations

import asyncio
import multiprocessing as mp
import sqlite3
from pathlib import Path

from flower.store import SqliteSessionStore

KEY = {"project_key": "p", "session_id": "s"}


async def test_uuid_is_an_idempotency_key(tmp_path: Path) -> None:
    store = SqliteSessionStore(tmp_path / "s.db")
    a, b = {"type": "user", "uuid": "a", "n": 1}, {"type": "user", "uuid": "b", "n": 2}
    title = {"type": "custom-title", "customTitle": "t"}
    await store.append(KEY, [a, title, a])  # type: ignore[arg-type, list-item]
    await store.append(KEY, [{**a, "n": 99}, b, title])  # type: ignore[arg-type, list-item]
    # first write wins (rows never change); uuid-less lines are appended every time
    assert await store.load(KEY) == [a, title, b, title]  # type: ignore[arg-type]
    # the same uuid under another key is another row
    sub = {**KEY, "subpath": "subagents/agent-1"}
    await store.append(sub, [a])  # type: ignore[arg-type, list-item]
    assert await store.load(sub) == [a]  # type: ignore[arg-type]


async def test_mtime_is_strictly_monotonic_and_shared(tmp_path: Path) -> None:
    store = SqliteSessionStore(tmp_path / "s.db")
    seen = []
    for i in range(20):
        entry = {"type": "x", "uuid": str(i), "timestamp": "2026-01-01T00:00:00Z"}
        await store.append(KEY, [entry])  # type: ignore[arg-type, list-item]
        (listed,) = await store.list_sessions("p")
        (summary,) = await store.list_session_summaries("p")
        assert summary["mtime"] == listed["mtime"]
        seen.append(listed["mtime"])
    assert all(b > a for a, b in zip(seen, seen[1:]))
    # a second store on the same file continues the clock instead of going back
    other = SqliteSessionStore(tmp_path / "s.db")
    other._last_mtime = 0
    await other.append(KEY, [{"type": "x", "uuid": "z"}])  # type: ignore[arg-type, list-item]
    assert (await other.list_sessions("p"))[0]["mtime"] > seen[-1]


async def test_wal_mode(tmp_path: Path) -> None:
    store = SqliteSessionStore(tmp_path / "s.db")
    await store.append(KEY, [{"type": "x"}])  # type: ignore[arg-type, list-item]
    with sqlite3.connect(tmp_path / "s.db") as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert {r[0] for r in sqlite3.connect(tmp_path / "s.db").execute(
        "SELECT name FROM sqlite_master WHERE type='table'")} >= {"entries", "meta", "summaries"}


def _writer(path: str, tag: str, batches: int, size: int) -> None:
    async def run() -> None:
        store = SqliteSessionStore(path)
        for b in range(batches):
            batch = [{"type": "user", "uuid": f"{tag}-{b}-{i}", "n": i} for i in range(size)]
            batch.append({"type": "tag", "tag": tag})  # uuid-less
            batch.append({"type": "user", "uuid": f"shared-{b}"})  # both processes write it
            await store.append(KEY, batch)  # type: ignore[arg-type]
            await store.append({**KEY, "subpath": f"subagents/agent-{tag}"}, batch[:1])  # type: ignore[arg-type]
        store.close()

    asyncio.run(run())


async def test_two_processes_lose_nothing(tmp_path: Path) -> None:
    path = str(tmp_path / "shared.db")
    batches, size = 60, 25
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=_writer, args=(path, tag, batches, size)) for tag in ("A", "B")]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    store = SqliteSessionStore(path)
    rows = await store.load(KEY)  # type: ignore[arg-type]
    assert rows is not None
    uuids = [r.get("uuid") for r in rows]
    for tag in ("A", "B"):
        mine = [u for u in uuids if u and u.startswith(f"{tag}-")]
        assert mine == [f"{tag}-{b}-{i}" for b in range(batches) for i in range(size)]  # all there, in order
        assert sum(1 for r in rows if r.get("tag") == tag) == batches
    assert sorted(u for u in uuids if u and u.startswith("shared-")) == sorted(f"shared-{b}" for b in range(batches))
    assert sorted(await store.list_subkeys(KEY)) == ["subagents/agent-A", "subagents/agent-B"]  # type: ignore[arg-type]
    (summary,) = await store.list_session_summaries("p")
    (listed,) = await store.list_sessions("p")
    assert summary["mtime"] == listed["mtime"]
