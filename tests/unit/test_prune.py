"""PruningSessionStore: old denied/errored calls leave the replayed transcript, which stays valid."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
from _transcripts import Entry, Transcript, Use, assert_valid_chain, bash, tool_results, tool_use_ids

from flower.store import PrunePolicy, PruningSessionStore, SqliteSessionStore, TrimPolicy, trim_report

DENIED = "PreToolUse:Bash hook error: 协调者没有写权限。"


def _denials(n: int = 3) -> tuple[Transcript, list[Use], Use]:
    t = Transcript()
    denied = [bash(f"rm -rf build{i}", DENIED, error=True) for i in range(n)]
    ok = bash("pytest -q", "3 passed")
    t.prompt("clean up and test")
    for i, d in enumerate(denied):
        t.reply(f"try {i}", d)
    t.reply("", ok)
    t.reply("done")
    t.end()
    return t, denied, ok


async def _load(tmp_path: Path, entries: list[Entry], keep: int = 1) -> tuple[list[Entry], PruningSessionStore]:
    store = PruningSessionStore(tmp_path / "s.db", workspace=tmp_path, prune=PrunePolicy(keep_denials=keep))
    key = {"project_key": "p", "session_id": "s"}
    await store.append(key, entries)  # type: ignore[arg-type]
    out = await store.load(key)  # type: ignore[arg-type]
    assert out is not None
    return out, store  # type: ignore[return-value]


async def test_keeps_newest_denials_only(tmp_path: Path) -> None:
    t, denied, ok = _denials(3)
    original = copy.deepcopy(t.entries)
    out, store = await _load(tmp_path, t.entries, keep=1)
    ids = tool_use_ids(out)
    assert ids == [denied[2].id, ok.id]
    assert sorted(tool_results(out)) == sorted(ids)
    assert_valid_chain(out)
    # the text of the assistant messages whose call was dropped stays
    texts = [b["text"] for e in out if e["type"] == "assistant" for b in e["message"]["content"] if b["type"] == "text"]
    assert texts == ["try 0", "try 1", "try 2", "done"]
    assert store.last_report["pruned"] == 2
    assert "pruned 2" in trim_report(store)
    # rows untouched
    assert await SqliteSessionStore(tmp_path / "s.db").load({"project_key": "p", "session_id": "s"}) == original


@pytest.mark.parametrize(("keep", "left"), [(0, 0), (2, 2), (5, 3)])
async def test_keep_denials(tmp_path: Path, keep: int, left: int) -> None:
    t, denied, _ = _denials(3)
    out, _ = await _load(tmp_path, t.entries, keep=keep)
    kept = [i for i in tool_use_ids(out) if i in {d.id for d in denied}]
    assert kept == [d.id for d in denied][len(denied) - left :]
    assert_valid_chain(out)


async def test_parallel_call_keeps_its_sibling(tmp_path: Path) -> None:
    t = Transcript()
    first_denied = bash("rm a", DENIED, error=True)
    good = bash("pytest", "ok")
    bad = bash("rm b", DENIED, error=True)
    last = bash("rm c", DENIED, error=True)
    t.prompt("go")
    t.reply("both", good, bad)  # bad is the *last* block: the next reply hangs off its result
    t.reply("", first_denied)
    t.reply("again", last)
    t.reply("done")
    t.end()
    out, _ = await _load(tmp_path, t.entries, keep=1)
    assert set(tool_use_ids(out)) == {good.id, last.id}
    assert_valid_chain(out)


async def test_leaf_and_meta_entries_follow(tmp_path: Path) -> None:
    t = Transcript()
    d1, d2 = bash("rm x", DENIED, error=True), bash("rm y", DENIED, error=True)
    t.prompt("go")
    t.reply("", d1)
    t._chain(t._base(type="attachment", attachment={"type": "hook_additional_context", "toolUseID": d1.id,
                                                    "content": ["denied by guard"]}))
    t.reply("", d2)  # the session ends on a denial: leafUuid points at a dropped result
    t.end()
    out, _ = await _load(tmp_path, t.entries, keep=0)
    assert tool_use_ids(out) == []
    assert not any((e.get("attachment") or {}).get("toolUseID") == d1.id for e in out)
    assert_valid_chain(out)


async def test_errors_without_their_call_are_left_alone(tmp_path: Path) -> None:
    """A result whose tool_use is not in this transcript (e.g. before a compaction) is not pruned."""
    t, _, _ = _denials(2)
    first_use = next(i for i, e in enumerate(t.entries) if e["type"] == "assistant"
                     and e["message"]["content"][0]["type"] == "tool_use")
    orphan_holder = t.entries[first_use]
    orphan_holder["message"]["content"] = [{"type": "text", "text": "(compacted)"}]
    out, store = await _load(tmp_path, t.entries, keep=0)
    assert store.last_report["pruned"] == 1


async def test_prune_after_trim(tmp_path: Path) -> None:
    t, denied, _ = _denials(3)
    for i in range(25):
        t.prompt(f"p{i}")
        t.reply("ok")
    t.end()
    store = PruningSessionStore(tmp_path / "s.db", tmp_path, TrimPolicy(keep_recent=2), prune=PrunePolicy(1))
    key = {"project_key": "p", "session_id": "s"}
    await store.append(key, t.entries)  # type: ignore[arg-type]
    out = await store.load(key)  # type: ignore[arg-type]
    assert [i for i in tool_use_ids(out) if i.startswith("toolu_")][0] == denied[2].id
    assert store.last_report["pruned"] == 2


def test_negative_keep_denials_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="use 0"):
        PruningSessionStore(tmp_path / "s.db", tmp_path, prune=PrunePolicy(keep_denials=-1))
