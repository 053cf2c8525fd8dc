"""TrimmingSessionStore on realistic Claude Code transcripts: expiry, spilling, invariants."""

from __future__ import annotations

import copy
import hashlib
from pathlib import Path
from typing import Any

import pytest
from _transcripts import Entry, Transcript, Use, assert_valid_chain, bash, read, tool_results, tool_use_ids

from flower.store import EphemeralPolicy, SqliteSessionStore, TrimmingSessionStore, TrimPolicy, trim_report
from flower.store.trim import turn_ages

BIG = "line of build output\n" * 400  # 8400 chars
EXPIRED = "[{cmd} 的结果已过期(第 {age} 轮前),当前状态可能已变。需要请重新执行]"


def _session(turns: int = 10) -> tuple[Transcript, dict[str, Use]]:
    """`turns` prompts; turn 1 has a stale git status, a big pytest log, a big Read and a long answer."""
    t = Transcript()
    uses = {
        "status": bash("git status", "On branch main\nChanges not staged:\n  modified: a.py\n"),
        "pytest": bash("pytest -q", BIG),
        "read": read("/w/a.py", "1\timport os\n" * 300),
        "ls_recent": bash("ls -la", "total 0\n"),
        "cat_recent": bash("cat huge.log", "y" * 5000),
    }
    t.prompt("fix the tests")
    t.reply("let me look", uses["status"], uses["pytest"])
    t.reply("", uses["read"])
    t.reply("A" * 3000)
    for i in range(2, turns):
        t.prompt(f"continue {i}")
        t.reply(f"ok {i}")
    t.prompt("last turn")
    t.reply("checking", uses["ls_recent"], uses["cat_recent"])
    t.end()
    return t, uses


async def _store(tmp_path: Path, entries: list[Entry], **kw: Any) -> tuple[TrimmingSessionStore, Any]:
    store = TrimmingSessionStore(tmp_path / "s.db", workspace=tmp_path / "ws", **kw)
    key = {"project_key": "p", "session_id": "s"}
    await store.append(key, entries)  # type: ignore[arg-type]
    return store, key


def test_turns_are_user_prompts_only() -> None:
    t, _ = _session(turns=3)
    ages = turn_ages(t.entries)
    assert ages[0] == 3  # queue-operation before the first prompt
    assert ages[-1] == 0  # the turn in progress
    assert max(ages) - min(ages) == 3  # tool results never start a turn


async def test_old_bulk_is_spilled_recent_kept(tmp_path: Path) -> None:
    t, uses = _session()
    store, key = await _store(tmp_path, t.entries, policy=TrimPolicy(keep_recent=3))
    out = await store.load(key)
    assert out is not None
    results = tool_results(out)
    spilled = results[uses["pytest"].id]["content"]
    assert spilled.startswith("[全文 8400 字符已转存到 ")
    path = Path(spilled.split("已转存到 ", 1)[1].split(",", 1)[0])
    assert path.parent == (tmp_path / "ws" / ".flower" / "spill").resolve()
    assert path.name == hashlib.sha256(BIG.encode()).hexdigest()[:16] + ".txt"
    assert path.read_text() == BIG
    assert len(spilled) < 600 and "line of build output" in spilled  # pointer + short head
    # Read is spilled like any old bulk (it never *expires*, but size still counts)
    assert "已转存到" in results[uses["read"].id]["content"]
    # old long assistant text spilled too
    texts = [b["text"] for e in out if e["type"] == "assistant" for b in e["message"]["content"] if b["type"] == "text"]
    assert not any(x == "A" * 3000 for x in texts) and any(x.startswith("[全文 3000 字符") for x in texts)
    # within keep_recent: untouched by trim (cat is capped by expiry, see below)
    assert results[uses["ls_recent"].id]["content"] == "total 0\n"
    # API invariants: every tool_use still has its tool_result; chain intact
    assert sorted(tool_use_ids(out)) == sorted(results)
    assert_valid_chain(out)
    assert store.last_report["spilled"] == 3


async def test_rows_never_change(tmp_path: Path) -> None:
    t, _ = _session()
    original = copy.deepcopy(t.entries)
    store, key = await _store(tmp_path, t.entries, policy=TrimPolicy(keep_recent=1))
    await store.load(key)
    await store.load(key)
    assert await SqliteSessionStore(tmp_path / "s.db").load(key) == original  # type: ignore[arg-type]


async def test_stale_ephemeral_results_expire(tmp_path: Path) -> None:
    t, uses = _session(turns=10)
    store, key = await _store(tmp_path, t.entries, policy=TrimPolicy(enabled=False))
    out = await store.load(key)
    assert out is not None
    results = tool_results(out)
    assert results[uses["status"].id]["content"] == EXPIRED.format(cmd="git status", age=9)
    assert results[uses["status"].id]["tool_use_id"] == uses["status"].id
    # non-ephemeral Bash and Read never expire
    assert results[uses["pytest"].id]["content"] == BIG
    assert results[uses["read"].id]["content"] == uses["read"].output
    # recent ephemeral: kept, but capped at max_chars (dropped, not spilled)
    assert results[uses["ls_recent"].id]["content"] == "total 0\n"
    capped = results[uses["cat_recent"].id]["content"]
    assert capped.startswith("y" * 2000) and "其余 3000 字符已丢弃" in capped
    assert not (tmp_path / "ws" / ".flower").exists()
    assert store.last_report == {"expired": 1, "capped": 1, "saved_chars": store.last_report["saved_chars"]}


async def test_expiry_window_and_custom_text(tmp_path: Path) -> None:
    t = Transcript()
    first = bash("git log --oneline | head -3", "abc fix\n")
    t.prompt("p1")
    t.reply("", first)
    for i in range(3):
        t.prompt(f"p{i}")
        t.reply("ok")
    t.end()
    pol = EphemeralPolicy(keep_recent=4, text="stale: {cmd} ({age})")
    store, key = await _store(tmp_path, t.entries, ephemeral=pol)
    out = await store.load(key)
    assert tool_results(out)[first.id]["content"] == "abc fix\n"  # age 3 < 4
    store.ephemeral = EphemeralPolicy(keep_recent=3, text="stale: {cmd} ({age})")
    out = await store.load(key)
    assert tool_results(out)[first.id]["content"] == "stale: git log --oneline | head -3 (3)"


async def test_images_and_compact_summary_untouched(tmp_path: Path) -> None:
    t = Transcript()
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "i" * 9000}}
    shot = Use("Read", {"file_path": "/w/shot.png"}, [image, {"type": "text", "text": "T" * 5000}])
    t.prompt("look at the screenshot")
    t.reply("", shot)
    summary = t.compact_summary("S" * 9000)
    for i in range(3):
        t.prompt(f"p{i}")
        t.reply("ok")
    t.end()
    store, key = await _store(tmp_path, t.entries, policy=TrimPolicy(keep_recent=1))
    out = await store.load(key)
    content = tool_results(out)[shot.id]["content"]
    assert content[0] == image
    assert content[1]["text"].startswith("[全文 5000 字符")
    assert [e for e in out if e.get("isCompactSummary")] == [summary]


async def test_tool_input_strings_are_spilled(tmp_path: Path) -> None:
    t = Transcript()
    write = Use("Write", {"file_path": "/w/big.py", "content": "x = 1\n" * 1000}, "File created")
    t.prompt("write it")
    t.reply("", write)
    t.prompt("next")
    t.reply("ok")
    t.end()
    store, key = await _store(tmp_path, t.entries, policy=TrimPolicy(keep_recent=1))
    out = await store.load(key)
    use = next(b for e in out if e["type"] == "assistant" for b in e["message"]["content"] if b["type"] == "tool_use")
    assert use["input"]["file_path"] == "/w/big.py"
    assert use["input"]["content"].startswith("[全文 6000 字符")


async def test_spill_is_content_addressed_and_idempotent(tmp_path: Path) -> None:
    t, _ = _session()
    store, key = await _store(tmp_path, t.entries, policy=TrimPolicy(keep_recent=1))
    first = await store.load(key)
    files = sorted((tmp_path / "ws" / ".flower" / "spill").iterdir())
    second = await store.load(key)
    assert first == second
    assert sorted((tmp_path / "ws" / ".flower" / "spill").iterdir()) == files
    assert all(len(f.stem) == 16 for f in files)


async def test_disabled_policies_return_rows_verbatim(tmp_path: Path) -> None:
    t, _ = _session()
    store, key = await _store(
        tmp_path, t.entries, policy=TrimPolicy(enabled=False), ephemeral=EphemeralPolicy(enabled=False)
    )
    assert await store.load(key) == t.entries
    assert store.last_report == {}
    assert trim_report(store) == "nothing trimmed"


async def test_report(tmp_path: Path) -> None:
    t, _ = _session()
    store, key = await _store(tmp_path, t.entries, policy=TrimPolicy(keep_recent=3))
    await store.load(key)
    r = store.last_report
    assert r["expired"] == 1 and r["spilled"] == 3 and r["capped"] == 1 and r["saved_chars"] > 15000
    text = trim_report(store)
    assert text.startswith("expired 1 · capped 1 · spilled 3 · ") and text.endswith("chars saved")
    assert trim_report({"pruned": 2}) == "pruned 2"
    assert await store.load({"project_key": "p", "session_id": "missing"}) is None
    assert store.last_report == {}


def test_spill_dir_must_stay_inside_workspace(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="inside the workspace"):
        TrimmingSessionStore(tmp_path / "s.db", tmp_path, TrimPolicy(spill_dirname="/tmp/elsewhere"))
    with pytest.raises(ValueError, match="inside the workspace"):
        TrimmingSessionStore(tmp_path / "s.db", tmp_path, TrimPolicy(spill_dirname="../out"))


def test_policy_defaults() -> None:
    p = TrimPolicy()
    assert (p.keep_recent, p.min_chars, p.spill_dirname, p.enabled) == (20, 2000, ".flower/spill", True)
