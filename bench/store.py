"""Session store figures: append throughput and load() time of a 10 000-entry session.

Prints, in one run and side by side: append entries/s (SQLite vs the SDK's in-memory
store), and load() of the same session plain (SqliteSessionStore) vs with every policy
(PruningSessionStore: expire + trim + prune), cold (spill files written) and warm, and the same
passes composed over the SDK's in-memory store (ReshapingSessionStore).
Targets: append >= 50 000 entries/s; load() with all policies <= 50 ms. Prints, never asserts.

    .venv/bin/python bench/store.py [--entries 10000] [--batch 100]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sqlite3
import statistics
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from claude_agent_sdk import InMemorySessionStore

from flower.store import PruningSessionStore, ReshapingSessionStore, SqliteSessionStore, TrimPolicy, trim_report

META = {"isSidechain": False, "userType": "external", "entrypoint": "sdk-py", "cwd": "/workspace/app",
        "version": "2.1.332", "gitBranch": "flower/run-1", "timestamp": "2026-01-01T00:00:00.000Z"}


def session(n: int, sid: str) -> list[dict[str, Any]]:
    """A Claude Code-shaped transcript: prompts, one block per assistant entry, result entries.

    Mix per tool call: git status (ephemeral), pytest logs (6 KB), Read (3 KB), small greps,
    and a guard denial every 15 calls (with the markers the CLI writes for a PreToolUse deny).
    """
    out: list[dict[str, Any]] = []
    tip: str | None = None
    k = 0

    def chain(**e: Any) -> dict[str, Any]:
        nonlocal tip
        e = {**META, "sessionId": sid, "parentUuid": tip, "uuid": str(uuid.uuid4()), **e}
        out.append(e)
        tip = e["uuid"]
        return e

    while len(out) < n:
        out.append({"type": "queue-operation", "operation": "enqueue", "content": "next", "sessionId": sid})
        chain(type="user", message={"role": "user", "content": f"Step {k}: continue the refactor, keep tests green."})
        chain(type="attachment", attachment={"type": "date", "date": "2026-01-01"})
        for j in range(6):
            k += 1
            kind = k % 5
            if k % 15 == 0:
                cmd, output, err = "rm -rf dist", "PreToolUse:Bash hook error: 协调者没有写权限。", True
            elif kind == 0:
                cmd, output, err = "git status", "On branch main\n  modified: src/app.py\n" * 4, False
            elif kind == 1:
                cmd, output, err = "pytest -q", "tests/test_app.py::test_case PASSED\n" * 170, False
            elif kind == 2:
                cmd, output, err = "", "     1\timport os\n" * 170, False
            else:
                cmd, output, err = "rg -n TODO src", "src/app.py:12: # TODO tidy\n" * 10, False
            tid = f"toolu_{k:08d}"
            mid = f"msg_{k:08d}"
            msg = {"id": mid, "type": "message", "role": "assistant", "model": "claude-x",
                   "stop_reason": "tool_use", "usage": {"input_tokens": 1000, "output_tokens": 50}}
            chain(type="assistant", message={**msg, "content": [{"type": "text", "text": "Let me check that."}]})
            name, inp = ("Read", {"file_path": "/workspace/app/src/app.py"}) if kind == 2 else (
                "Bash", {"command": cmd, "description": "check"})
            use = chain(type="assistant", message={**msg, "content": [
                {"type": "tool_use", "id": tid, "name": name, "input": inp}]})
            out.append({"type": "last-prompt", "lastPrompt": "next", "leafUuid": tip, "sessionId": sid})
            marks = {"toolDenialKind": "permission-rule",
                     "permissionDecision": {"decision": "reject", "source": "hook"}} if err else {}
            chain(type="user", parentUuid=use["uuid"], sourceToolAssistantUUID=use["uuid"],
                  message={"role": "user", "content": [
                      {"tool_use_id": tid, "type": "tool_result", "content": output, "is_error": err}]},
                  toolUseResult=f"Error: {output}" if err else {"stdout": output, "stderr": "", "interrupted": False},
                  **marks)
        chain(type="assistant", message={"id": f"msg_end_{k}", "type": "message", "role": "assistant",
                                         "content": [{"type": "text", "text": "Done with this step."}]})
        out.append({"type": "cost-state", "sessionId": sid, "totalCostUSD": 0.5})
    return out[:n]


async def timed(coro: Any) -> float:
    t0 = time.perf_counter()
    await coro
    return time.perf_counter() - t0


async def append_rate(store: Any, entries: list[dict[str, Any]], batch: int) -> float:
    key = {"project_key": "bench", "session_id": str(uuid.uuid4())}
    t0 = time.perf_counter()
    for i in range(0, len(entries), batch):
        await store.append(key, entries[i : i + batch])
    return len(entries) / (time.perf_counter() - t0)


def raw_insert_rate(path: Path, entries: list[dict[str, Any]], batch: int) -> float:
    """The floor for append: the same rows, pre-encoded, through plain executemany (same pragmas, no dedupe)."""
    import msgspec

    blobs = [msgspec.json.encode(e) for e in entries]
    conn = sqlite3.connect(path, isolation_level=None)
    for pragma in ("page_size=16384", "journal_mode=WAL", "synchronous=NORMAL"):
        conn.execute(f"PRAGMA {pragma}")
    conn.execute("CREATE TABLE e (id INTEGER PRIMARY KEY, key_id INTEGER, uuid TEXT, data BLOB)")
    conn.execute("CREATE INDEX e_by_key ON e(key_id, id)")
    t0 = time.perf_counter()
    for i in range(0, len(blobs), batch):
        conn.execute("BEGIN IMMEDIATE")
        conn.executemany("INSERT INTO e(key_id, uuid, data) VALUES (1, ?, ?)",
                         [(e.get("uuid"), b) for e, b in zip(entries[i : i + batch], blobs[i : i + batch])])
        conn.execute("COMMIT")
    rate = len(blobs) / (time.perf_counter() - t0)
    conn.close()
    return rate


def raw_load(path: Path) -> float:
    """The floor for load(): fetch every row and decode it, nothing else."""
    import gc

    import msgspec

    decode = msgspec.json.Decoder().decode
    conn = sqlite3.connect(path)
    t0 = time.perf_counter()
    gc.disable()
    [decode(d) for (d,) in conn.execute("SELECT data FROM entries ORDER BY id")]
    gc.enable()
    took = time.perf_counter() - t0
    conn.close()
    return took


async def main(n: int, batch: int) -> None:
    sid = str(uuid.uuid4())
    entries = session(n, sid)
    size = sum(len(json.dumps(e)) for e in entries)
    with tempfile.TemporaryDirectory(prefix="flower-bench-") as tmp:
        root = Path(tmp)
        mems, sqls, raws = [], [], []
        for i in range(3):  # interleaved, so a busy machine slows all three alike
            mems.append(await append_rate(InMemorySessionStore(), entries, batch))
            sqls.append(await append_rate(SqliteSessionStore(root / f"rate{i}.db"), entries, batch))
            raws.append(raw_insert_rate(root / f"raw{i}.db", entries, batch))

        key = {"project_key": "bench", "session_id": sid}
        plain = SqliteSessionStore(root / "s.db")
        await plain.append(key, entries)  # type: ignore[arg-type]
        full = PruningSessionStore(root / "s.db", workspace=root / "ws", policy=TrimPolicy(keep_recent=20))
        cold = await timed(full.load(key))  # type: ignore[arg-type]
        report = (f"{trim_report(full)}; {full.last_report.get('expired', 0)} expired; "
                  f"{full.denials_dropped} denied calls pruned ({full.pruned} entries)")
        plains, fulls, floors = [], [], []
        for _ in range(9):
            floors.append(raw_load(root / "s.db"))
            plains.append(await timed(plain.load(key)))  # type: ignore[arg-type]
            fulls.append(await timed(full.load(key)))  # type: ignore[arg-type]
        # the same passes composed over the SDK's in-memory store (which needs the deep copy)
        mem_store = InMemorySessionStore()
        await mem_store.append(key, entries)  # type: ignore[arg-type]
        composed = ReshapingSessionStore(mem_store, full.passes)
        mem_plains = [await timed(mem_store.load(key)) for _ in range(9)]  # type: ignore[arg-type]
        composeds = [await timed(composed.load(key)) for _ in range(9)]  # type: ignore[arg-type]
        trimmed = await full.load(key)  # type: ignore[arg-type]
        out_size = sum(len(json.dumps(e)) for e in trimmed or [])

    mem, sql, raw = statistics.median(mems), statistics.median(sqls), statistics.median(raws)
    plain_t, warm_t = statistics.median(plains) * 1000, statistics.median(fulls) * 1000
    floor_t = statistics.median(floors) * 1000
    print(f"session: {n} entries, {size / 1e6:.1f} MB of JSON, batches of {batch}; median (best) of 3 / 9 runs")
    print(f"append   in-memory (SDK) {mem:>10,.0f} entries/s ({max(mems):,.0f})")
    print(f"append   raw SQLite      {raw:>10,.0f} entries/s ({max(raws):,.0f})   floor: executemany of pre-encoded rows")
    print(f"append   sqlite          {sql:>10,.0f} entries/s ({max(sqls):,.0f})   "
          f"{sql / raw:.2f}x of raw SQLite   target >= 50,000")
    print(f"load()   fetch + decode  {floor_t:>8.1f} ms ({min(floors) * 1000:.1f})   floor: the rows decoded, nothing else")
    print(f"load()   plain sqlite    {plain_t:>8.1f} ms ({min(plains) * 1000:.1f})   {plain_t / floor_t:.2f}x of the floor")
    print(f"load()   all policies    {warm_t:>8.1f} ms ({min(fulls) * 1000:.1f})   "
          f"{warm_t / floor_t:.2f}x of the floor, {warm_t / plain_t:.2f}x of plain   target <= 50 ms")
    mem_t, comp_t = statistics.median(mem_plains) * 1000, statistics.median(composeds) * 1000
    print(f"load()   in-memory (SDK) {mem_t:>8.1f} ms; composed passes over it {comp_t:.1f} ms "
          f"({min(composeds) * 1000:.1f}; copy included)")
    print(f"load()   all, cold spill {cold * 1000:>8.1f} ms   (first load also writes the spill files)")
    print(f"resumed transcript       {out_size / 1e6:.2f} MB ({out_size / size:.0%} of the rows); {report}")


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--entries", type=int, default=10_000)
    ap.add_argument("--batch", type=int, default=100)
    args = ap.parse_args()
    asyncio.run(main(args.entries, args.batch))
