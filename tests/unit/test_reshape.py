"""The reshaping passes as plain functions of one transcript, and the composed store over any SessionStore."""

from __future__ import annotations

import copy
from pathlib import Path

from _transcripts import Transcript, bash, denied, read, tool_results
from claude_agent_sdk import InMemorySessionStore

from flower.store import (
    EphemeralPolicy,
    Expire,
    Prune,
    PrunePolicy,
    PruningSessionStore,
    ReshapingSessionStore,
    SqliteSessionStore,
    Trim,
    TrimPolicy,
    run_passes,
)
from flower.store.transcript import TranscriptIndex

KEY = {"project_key": "p", "session_id": "s"}
BIG = "x" * 5000


def _session() -> tuple[Transcript, dict[str, object]]:
    t = Transcript()
    uses = {"status": bash("git status", "On branch main\n"), "big": bash("make", BIG),
            "no": denied("touch x"), "no2": denied("touch y"), "read": read("/w/a", "1\ta\n")}
    t.prompt("go")
    t.reply("", uses["status"], uses["big"])
    t.reply("", uses["no"])
    t.reply("", uses["no2"], uses["read"])
    for i in range(6):
        t.reply("", bash(f"make step{i}", "ok"))
    t.end()
    return t, uses


def test_each_pass_is_a_function_of_the_entries_with_a_report(tmp_path: Path) -> None:
    t, uses = _session()
    entries = copy.deepcopy(t.entries)
    out, report = Expire(EphemeralPolicy())(entries, TranscriptIndex(entries))
    assert out is entries and report == {"expired": 1}
    out, report = Trim(TrimPolicy(keep_recent=2), tmp_path)(entries, TranscriptIndex(entries))
    assert report == {"cleared": 1, "kept": 2, "chars_saved": report["chars_saved"]} and report["chars_saved"] > 4000
    out, report = Prune(PrunePolicy(keep_denials=1))(entries, TranscriptIndex(entries))
    assert out is not entries and report["denials_dropped"] == 1 and report["pruned"] >= 2
    results = tool_results(out)
    assert uses["no"].id not in results and uses["no2"].id in results  # the newest denial stays
    assert results[uses["read"].id]["content"] == "1\ta\n"


def test_run_passes_reports_by_pass_and_rebuilds_the_index_after_a_new_list(tmp_path: Path) -> None:
    t, uses = _session()
    passes = [Expire(EphemeralPolicy()), Prune(PrunePolicy(keep_denials=0)), Trim(TrimPolicy(keep_recent=0), tmp_path)]
    out, reports = run_passes(copy.deepcopy(t.entries), passes)
    assert list(reports) == ["expire", "prune", "trim"]
    assert reports["prune"]["denials_dropped"] == 2
    # trim ran on the pruned list: its count of results no longer includes the two denials
    assert reports["trim"]["kept"] == 0 and len(tool_results(out)) == len(tool_results(t.entries)) - 2


async def test_the_composed_store_reshapes_a_copy_and_never_the_inner_rows(tmp_path: Path) -> None:
    t, uses = _session()
    for inner in (InMemorySessionStore(), SqliteSessionStore(tmp_path / "s.db")):
        store = ReshapingSessionStore(inner, [Expire(EphemeralPolicy()), Prune(PrunePolicy(keep_denials=0))])
        await store.append(KEY, copy.deepcopy(t.entries))  # type: ignore[arg-type]
        out = await store.load(KEY)  # type: ignore[arg-type]
        assert out is not None and store.last_report["expired"] == 1 and store.last_report["denials_dropped"] == 2
        assert set(store.reports) == {"expire", "prune"}
        raw = await inner.load(KEY)  # type: ignore[arg-type]
        assert raw == t.entries, f"{type(inner).__name__}: the stored rows changed"
        assert await store.load({"project_key": "p", "session_id": "none"}) is None  # type: ignore[arg-type]
        assert store.reports == {} and store.last_report == {}


async def test_the_reference_store_is_the_same_passes(tmp_path: Path) -> None:
    """PruningSessionStore and ReshapingSessionStore(sqlite, [Expire, Trim, Prune]) give the same transcript."""
    t, _ = _session()
    ws = tmp_path / "ws"
    tower = PruningSessionStore(tmp_path / "a.db", ws, TrimPolicy(keep_recent=2))
    composed = ReshapingSessionStore(SqliteSessionStore(tmp_path / "b.db"),
                                     [Expire(EphemeralPolicy()), Trim(TrimPolicy(keep_recent=2), tower.spill_dir),
                                      Prune(PrunePolicy())])
    for s in (tower, composed):
        await s.append(KEY, copy.deepcopy(t.entries))  # type: ignore[arg-type]
    assert await tower.load(KEY) == await composed.load(KEY)  # type: ignore[arg-type]
    assert tower.reports == composed.reports and tower.denials_dropped == composed.last_report["denials_dropped"]
