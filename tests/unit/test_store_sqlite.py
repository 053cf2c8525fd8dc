"""SqliteSessionStore specifics beyond the SDK contracts: idempotency, clock, two processes."""

from __future__ import annotations

import asyncio
import multiprocessing as mp
import sqlite3
from pathlib import Path

import pytest

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


async def test_replayed_batch_moves_nothing(tmp_path: Path) -> None:
    """A batch whose uuids are all stored (the CLI re-sending after a reconnect) leaves mtime and summary alone."""
    store = SqliteSessionStore(tmp_path / "s.db")
    batch = [{"type": "user", "uuid": "a", "timestamp": "2026-01-01T00:00:00Z", "message": {"content": "hi"}},
             {"type": "assistant", "uuid": "b", "timestamp": "2026-01-01T00:00:01Z"}]
    await store.append(KEY, batch)  # type: ignore[arg-type]
    (listed,) = await store.list_sessions("p")
    (summary,) = await store.list_session_summaries("p")
    await store.append(KEY, batch)  # type: ignore[arg-type]
    await store.append(KEY, [batch[1], batch[1]])  # type: ignore[arg-type]
    assert await store.list_sessions("p") == [listed]
    assert await store.list_session_summaries("p") == [summary]
    assert await store.load(KEY) == batch  # type: ignore[arg-type]
    # a batch with one new line among replayed ones: stored once, the clock moves
    await store.append(KEY, [*batch, {"type": "user", "uuid": "c"}, {"type": "user", "uuid": "c"}])  # type: ignore[arg-type]
    assert [e["uuid"] for e in await store.load(KEY)] == ["a", "b", "c"]  # type: ignore[arg-type, union-attr]
    assert (await store.list_sessions("p"))[0]["mtime"] > listed["mtime"]


async def test_delete_cascades_to_subagent_transcripts(tmp_path: Path) -> None:
    store = SqliteSessionStore(tmp_path / "s.db")
    sub = {**KEY, "subpath": "subagents/agent-1"}
    await store.append(KEY, [{"type": "user", "uuid": "m"}])  # type: ignore[arg-type, list-item]
    await store.append(sub, [{"type": "user", "uuid": "s"}])  # type: ignore[arg-type, list-item]
    await store.delete(sub)  # type: ignore[arg-type]
    assert await store.load(KEY) is not None and await store.list_subkeys(KEY) == []  # type: ignore[arg-type]
    await store.append(sub, [{"type": "user", "uuid": "s"}])  # type: ignore[arg-type, list-item]
    await store.delete(KEY)  # type: ignore[arg-type]
    assert await store.load(sub) is None and await store.list_subkeys(KEY) == []  # type: ignore[arg-type]
    with sqlite3.connect(tmp_path / "s.db") as conn:
        assert conn.execute("SELECT COUNT(*) FROM entries").fetchone()[0] == 0
        assert conn.execute("SELECT COUNT(*) FROM meta").fetchone()[0] == 0


def _usage(i: int, o: int, cr: int = 0, cc: int = 0) -> dict[str, int]:
    return {"input_tokens": i, "output_tokens": o, "cache_read_input_tokens": cr, "cache_creation_input_tokens": cc}


def test_sync_lookups_need_no_event_loop(tmp_path: Path) -> None:
    """has_session / projects / last_context are plain calls (a Runtime asks them outside any loop)."""
    store = SqliteSessionStore(tmp_path / "s.db")
    assert store.projects() == [] and not store.has_session("p", "s") and store.last_context("p", "s") == 0
    entries = [
        {"type": "user", "uuid": "u1", "message": {"role": "user", "content": "go"}},
        {"type": "assistant", "uuid": "a1", "message": {"model": "claude-x", "usage": _usage(100, 5, 9000, 300)}},
        {"type": "user", "uuid": "u2", "message": {"role": "user", "content": [{"type": "tool_result"}]}},
        {"type": "assistant", "uuid": "a2", "message": {"model": "claude-x", "usage": _usage(200, 7, 9100, 50)}},
        {"type": "assistant", "uuid": "e1", "isApiErrorMessage": True,
         "message": {"model": "<synthetic>", "usage": _usage(0, 0)}},
        {"type": "last-prompt", "leafUuid": "e1"},
    ]
    asyncio.run(store.append(KEY, entries))  # type: ignore[arg-type]
    asyncio.run(store.append({"project_key": "q", "session_id": "t", "subpath": "subagents/agent-1"},  # type: ignore[arg-type]
                             [{"type": "assistant", "message": {"usage": _usage(1, 1)}}]))
    assert store.projects() == ["p", "q"]
    assert store.has_session("p", "s") and not store.has_session("p", "other") and not store.has_session("q", "s")
    assert not store.has_session("q", "t")  # only a subagent transcript: nothing to resume
    # the newest real assistant message: input + cache read + cache creation (output excluded)
    assert store.last_context("p", "s") == 200 + 9100 + 50
    assert store.last_context("p", "s", scan=2) == 0  # only the error and the bookkeeping line in reach
    assert store.last_context("p", "missing") == 0
    store.close()
    assert store.has_session("p", "s")  # reopens after close()
    store.close()


def test_a_transcript_of_bookkeeping_alone_is_no_session_to_resume(tmp_path: Path) -> None:
    """The CLI's process killed before its first message reached the store leaves a transcript of bookkeeping
    lines: resumed, the CLI answers "No conversation found" — every retry, every resume of a run — so it is no
    session: the step starts afresh (found by killing a run's sandbox right after it asked its first question)."""
    store = SqliteSessionStore(tmp_path / "s.db")
    asyncio.run(store.append(KEY, [{"type": "api-request-route"}, {"type": "queue-operation", "operation": "enqueue"},  # type: ignore[arg-type]
                                   {"type": "attachment", "attachment": {"type": "user"}}]))
    assert not store.has_session("p", "s")
    asyncio.run(store.append(KEY, [{"type": "user", "uuid": "u1", "message": {"role": "user", "content": "go"}}]))  # type: ignore[arg-type]
    assert store.has_session("p", "s")
    store.close()


async def test_two_stores_on_one_file_skip_each_others_uuids(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each store trusts its memory of a key's uuids only while the key's write stamp is the one it wrote.

    The clock stands still, as it does when a delete and a re-append land in one millisecond: a store that
    trusted the mtime saw its own value come back (SQLite reuses the row id too) and dropped a new entry.
    """
    monkeypatch.setattr("flower.store.sqlite.time.time", lambda: 1_800_000_000.0)
    a, b = SqliteSessionStore(tmp_path / "s.db"), SqliteSessionStore(tmp_path / "s.db")
    await a.append(KEY, [{"type": "user", "uuid": "1"}])  # type: ignore[arg-type, list-item]
    await b.append(KEY, [{"type": "user", "uuid": "1"}, {"type": "user", "uuid": "2"}])  # type: ignore[arg-type, list-item]
    await a.append(KEY, [{"type": "user", "uuid": "2"}, {"type": "user", "uuid": "3"}])  # type: ignore[arg-type, list-item]
    await b.delete(KEY)  # type: ignore[arg-type]
    await b.append(KEY, [{"type": "user", "uuid": "3"}])  # type: ignore[arg-type, list-item]
    await a.append(KEY, [{"type": "user", "uuid": "3"}, {"type": "user", "uuid": "1"}])  # type: ignore[arg-type, list-item]
    assert [e["uuid"] for e in await a.load(KEY) or []] == ["3", "1"]  # type: ignore[arg-type, typeddict-item]
    with sqlite3.connect(tmp_path / "s.db") as conn:  # a file made before: its unique index still holds
        conn.execute("CREATE UNIQUE INDEX entries_uuid ON entries(key_id, uuid) WHERE uuid IS NOT NULL")
    await SqliteSessionStore(tmp_path / "s.db").append(KEY, [{"type": "user", "uuid": "1"}])  # type: ignore[arg-type, list-item]
    assert len(await a.load(KEY) or []) == 2  # type: ignore[arg-type]


def test_the_summary_fold_matches_the_sdks_batch_by_batch() -> None:
    """fold_summary skips entries only where the SDK's fold would overwrite what they set."""
    from claude_agent_sdk import fold_session_summary

    from flower.store.summary import fold_summary

    entries: list[dict[str, object]] = [{"type": "queue-operation", "operation": "enqueue"}]
    for i in range(150):
        meta = {"cwd": "/w", "gitBranch": f"b{i % 7}", "timestamp": f"2026-01-01T00:{i % 60:02d}:00.000Z",
                "isSidechain": False, "uuid": f"u{i}"}
        prompt = "<command-name>/init</command-name>" if i == 0 else f"step {i}"
        entries += [{**meta, "type": "user", "message": {"role": "user", "content": prompt}},
                    {**meta, "type": "assistant", "message": {"role": "assistant", "content": []}},
                    {**meta, "type": "user", "message": {"role": "user", "content": [{"type": "tool_result"}]}},
                    {"type": "last-prompt", "lastPrompt": f"step {i}"}]
    entries[50:50] = [{"type": "custom-title", "customTitle": "t1"}, {"type": "tag", "tag": "x"},
                      {"type": "ai-title", "aiTitle": "ai"}, {"type": "summary", "summary": "s"}]
    entries[300:300] = [{"type": "tag", "tag": ""}, {"type": "custom-title", "customTitle": "t2"},
                        {"type": "tag", "tag": "y"}, {"type": "user", "gitBranch": "other"}]
    key = {"project_key": "p", "session_id": "s"}
    ours = theirs = None
    for i in range(0, len(entries), 37):
        batch = entries[i : i + 37]
        ours, theirs = fold_summary(ours, key, batch), fold_session_summary(theirs, key, batch)  # type: ignore[arg-type]
        assert ours == theirs
    assert ours and ours["data"]["first_prompt"] == "step 1" and ours["data"]["custom_title"] == "t2"
