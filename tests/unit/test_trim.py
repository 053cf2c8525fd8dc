"""TrimmingSessionStore on realistic Claude Code transcripts: expiry, spilling, the report, invariants."""

from __future__ import annotations

import copy
import hashlib
from pathlib import Path
from typing import Any

import pytest
from _transcripts import Entry, Transcript, Use, assert_valid_chain, bash, denied, read, tool_results, tool_use_ids

from flower.store import EphemeralPolicy, SqliteSessionStore, TrimmingSessionStore, TrimPolicy, trim_report

BIG = "line of build output\n" * 400  # 8400 chars
READ = "1\timport os\n" * 300  # 3600 chars
KEY = {"project_key": "p", "session_id": "s"}


def _session(fillers: int = 5) -> tuple[Transcript, dict[str, Use]]:
    """Tool results, oldest first: status, pytest (8400), read (3600), `fillers` echoes, ls, cat (5000)."""
    t = Transcript()
    uses = {
        "status": bash("git status", "On branch main\nChanges not staged:\n  modified: a.py\n"),
        "pytest": bash("pytest -q", BIG),
        "read": read("/w/a.py", READ),
        "ls_recent": bash("ls -la", "total 0\n"),
        "cat_recent": bash("cat huge.log", "y" * 5000),
    }
    t.prompt("fix the tests")
    t.reply("let me look", uses["status"], uses["pytest"])
    t.reply("", uses["read"])
    t.reply("A" * 3000)
    for i in range(fillers):
        t.prompt(f"continue {i}")
        t.reply("", bash(f"make step{i}", f"{i}\n"))
    t.prompt("last turn")
    t.reply("checking", uses["ls_recent"], uses["cat_recent"])
    t.end()
    return t, uses


async def _store(tmp_path: Path, entries: list[Entry], **kw: Any) -> TrimmingSessionStore:
    store = TrimmingSessionStore(tmp_path / "s.db", workspace=tmp_path / "ws", **kw)
    await store.append(KEY, entries)  # type: ignore[arg-type]
    return store


def _pointer_path(text: str) -> Path:
    return Path(text.split("已转存到 ", 1)[1].split(",", 1)[0])


# -- trimming -------------------------------------------------------------------


async def test_old_bulk_is_spilled_recent_kept(tmp_path: Path) -> None:
    t, uses = _session()  # 10 tool results
    store = await _store(tmp_path, t.entries, policy=TrimPolicy(keep_recent=3), ephemeral=EphemeralPolicy(enabled=False))
    out = await store.load(KEY)  # type: ignore[arg-type]
    assert out is not None
    results = tool_results(out)
    spilled = results[uses["pytest"].id]["content"]
    path = _pointer_path(spilled)
    assert spilled == TrimPolicy().placeholder(str(path), 8400)  # the body is the pointer line, nothing else
    assert path.parent == (tmp_path / "ws" / ".flower" / "spill").resolve()
    assert path.name == hashlib.sha256(BIG.encode()).hexdigest()[:16] + ".txt"
    assert path.read_text() == BIG
    assert "已转存到" in results[uses["read"].id]["content"]  # Read is spilled like any old bulk
    # within the newest 3 results: untouched, however long
    assert results[uses["cat_recent"].id]["content"] == "y" * 5000
    # short old results are not worth the cut
    assert results[uses["status"].id]["content"] == uses["status"].output
    # only tool results are trimmed: assistant text stays as the model wrote it
    texts = [b["text"] for e in out if e["type"] == "assistant" for b in e["message"]["content"] if b["type"] == "text"]
    assert "A" * 3000 in texts
    # API invariants: every tool_use still has its tool_result; chain intact
    assert sorted(tool_use_ids(out)) == sorted(results)
    assert_valid_chain(out)
    saved = (8400 - len(spilled)) + (3600 - len(results[uses["read"].id]["content"]))
    assert store.last_report == {"cleared": 2, "kept": 3, "chars_saved": saved}


@pytest.mark.parametrize(("keep", "pytest_spilled", "read_spilled"), [(9, False, False), (8, True, False),
                                                                      (7, True, True), (0, True, True)])
async def test_window_counts_tool_results(tmp_path: Path, keep: int, pytest_spilled: bool, read_spilled: bool) -> None:
    """pytest is the 2nd of 10 results, read the 3rd: the newest `keep` results keep their text."""
    t, uses = _session()
    store = await _store(tmp_path, t.entries, policy=TrimPolicy(keep_recent=keep))
    results = tool_results(await store.load(KEY))  # type: ignore[arg-type]
    assert ("已转存到" in results[uses["pytest"].id]["content"]) is pytest_spilled
    assert ("已转存到" in results[uses["read"].id]["content"]) is read_spilled
    assert store.last_report["kept"] == min(keep, 10)
    if keep == 0:
        assert "已转存到" in results[uses["cat_recent"].id]["content"]


@pytest.mark.parametrize(("size", "spilled"), [(1999, False), (2000, True)])
async def test_min_chars_is_inclusive(tmp_path: Path, size: int, spilled: bool) -> None:
    t = Transcript()
    u = bash("make", "m" * size)
    t.prompt("go")
    t.reply("", u)
    t.end()
    store = await _store(tmp_path, t.entries, policy=TrimPolicy(keep_recent=0))
    content = tool_results(await store.load(KEY))[u.id]["content"]  # type: ignore[arg-type]
    assert ("已转存到" in content) is spilled
    assert store.last_report["cleared"] == int(spilled)


async def test_rows_never_change(tmp_path: Path) -> None:
    t, _ = _session()
    original = copy.deepcopy(t.entries)
    store = await _store(tmp_path, t.entries, policy=TrimPolicy(keep_recent=1))
    await store.load(KEY)  # type: ignore[arg-type]
    await store.load(KEY)  # type: ignore[arg-type]
    assert await SqliteSessionStore(tmp_path / "s.db").load(KEY) == original  # type: ignore[arg-type]


async def test_images_and_compact_summary_untouched(tmp_path: Path) -> None:
    t = Transcript()
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "i" * 9000}}
    shot = Use("Read", {"file_path": "/w/shot.png"}, [image, {"type": "text", "text": "T" * 5000}])
    t.prompt("look at the screenshot")
    t.reply("", shot)
    summary = t.compact_summary("S" * 9000)
    t.prompt("p")
    t.reply("", bash("echo", "x"))
    t.end()
    store = await _store(tmp_path, t.entries, policy=TrimPolicy(keep_recent=1))
    out = await store.load(KEY)  # type: ignore[arg-type]
    content = tool_results(out)[shot.id]["content"]
    assert content[0] == image
    assert content[1]["text"].startswith("[这段工具结果共 5000 字符")
    assert [e for e in out if e.get("isCompactSummary")] == [summary]


async def test_tool_inputs_are_not_trimmed(tmp_path: Path) -> None:
    t = Transcript()
    write = Use("Write", {"file_path": "/w/big.py", "content": "x = 1\n" * 1000}, "File created")
    t.prompt("write it")
    t.reply("", write)
    t.prompt("next")
    t.reply("", bash("echo", "x"))
    t.end()
    store = await _store(tmp_path, t.entries, policy=TrimPolicy(keep_recent=0))
    out = await store.load(KEY)  # type: ignore[arg-type]
    use = next(b for e in out if e["type"] == "assistant" for b in e["message"]["content"] if b["type"] == "tool_use")
    assert use["input"]["content"] == "x = 1\n" * 1000


async def test_spill_is_content_addressed_and_idempotent(tmp_path: Path) -> None:
    t, _ = _session()
    store = await _store(tmp_path, t.entries, policy=TrimPolicy(keep_recent=1))
    first = await store.load(KEY)  # type: ignore[arg-type]
    files = sorted((tmp_path / "ws" / ".flower" / "spill").iterdir())
    second = await store.load(KEY)  # type: ignore[arg-type]
    assert first == second
    assert sorted((tmp_path / "ws" / ".flower" / "spill").iterdir()) == files
    assert len(files) == 2 and all(len(f.stem) == 16 for f in files)  # pytest, read (cat is the newest)


def test_trim_method_works_on_a_plain_list(tmp_path: Path) -> None:
    t, uses = _session()
    store = TrimmingSessionStore(tmp_path / "s.db", tmp_path, TrimPolicy(keep_recent=0))
    out = store.trim(t.entries)
    assert "已转存到" in tool_results(out)[uses["pytest"].id]["content"]
    assert store.last_report["cleared"] == 3


# -- expiry ------------------------------------------------------------------------


async def test_stale_ephemeral_results_expire(tmp_path: Path) -> None:
    t, uses = _session()  # status is the oldest of 10 results: 9 came after it
    store = await _store(tmp_path, t.entries, policy=TrimPolicy(enabled=False))
    out = await store.load(KEY)  # type: ignore[arg-type]
    assert out is not None
    results = tool_results(out)
    assert results[uses["status"].id]["content"] == EphemeralPolicy().placeholder("git status", 9)
    assert results[uses["status"].id]["tool_use_id"] == uses["status"].id  # the block stays
    # non-ephemeral Bash and Read never expire
    assert results[uses["pytest"].id]["content"] == BIG
    assert results[uses["read"].id]["content"] == READ
    # within the newest keep_recent=6 results: kept whole
    assert results[uses["ls_recent"].id]["content"] == "total 0\n"
    assert results[uses["cat_recent"].id]["content"] == "y" * 5000
    assert not (tmp_path / "ws" / ".flower").exists()  # expired text is dropped, never spilled
    assert store.last_report == {"expired": 1}


async def test_expiry_window_counts_tool_results_and_custom_text(tmp_path: Path) -> None:
    t = Transcript()
    first = bash("git log --oneline | head -3", "abc fix\n")
    t.prompt("p1")
    t.reply("", first)
    for i in range(3):
        t.reply("", bash(f"make step{i}", "ok"))  # same turn: a long turn still ages its results
    t.end()
    store = await _store(tmp_path, t.entries, ephemeral=EphemeralPolicy(keep_recent=4, text="stale: {cmd} ({age})"))
    assert tool_results(await store.load(KEY))[first.id]["content"] == "abc fix\n"  # type: ignore[arg-type]
    store.ephemeral = EphemeralPolicy(keep_recent=3, text="stale: {cmd} ({age})")
    out = await store.load(KEY)  # type: ignore[arg-type]
    assert tool_results(out)[first.id]["content"] == "stale: git log --oneline | head -3 (3)"


async def _aged(tmp_path: Path, *first: Use) -> TrimmingSessionStore:
    """A store holding ``first`` in one reply, then six newer results: ``first`` is outside keep_recent."""
    t = Transcript()
    t.prompt("go")
    t.reply("", *first)
    for i in range(6):
        t.reply("", bash(f"make step{i}", "ok"))
    t.end()
    return await _store(tmp_path, t.entries, policy=TrimPolicy(enabled=False))


async def test_a_short_read_never_expires(tmp_path: Path) -> None:
    """Read is not a snapshot of a moment: a short old Read stays whole beside an expiring `git status`.

    The Read in ``_session`` is longer than ``max_chars``, so it is skipped for length; this
    one is short, so only "a Read never expires" keeps it.
    """
    status = bash("git status", "On branch main\n")
    short = read("/w/VERSION", "1\t0.1.0\n")
    store = await _aged(tmp_path, status, short)
    results = tool_results(await store.load(KEY))  # type: ignore[arg-type]
    assert results[status.id]["content"].startswith("[git status 的结果已过期")
    assert results[short.id]["content"] == "1\t0.1.0\n"
    assert store.last_report == {"expired": 1}


async def test_long_ephemeral_results_are_left_for_trim(tmp_path: Path) -> None:
    """Above max_chars, expiry skips the result; trimming then spills it (it may be worth reading)."""
    long_ls = bash("ls -R", "f\n" * 1500)  # 3000 chars
    short_ls = bash("ls", "a b\n")
    store = await _aged(tmp_path, long_ls, short_ls)
    results = tool_results(await store.load(KEY))  # type: ignore[arg-type]
    assert results[long_ls.id]["content"] == "f\n" * 1500
    assert results[short_ls.id]["content"].startswith("[ls 的结果已过期")
    assert store.last_report == {"expired": 1}
    store.policy = TrimPolicy(keep_recent=6)
    results = tool_results(await store.load(KEY))  # type: ignore[arg-type]
    assert "已转存到" in results[long_ls.id]["content"]
    assert store.last_report["expired"] == 1 and store.last_report["cleared"] == 1


async def test_denied_calls_are_not_expired(tmp_path: Path) -> None:
    """A denied `ls` never ran: its result is a refusal, for pruning to judge, not a stale snapshot."""
    t = Transcript()
    refused = denied("ls")
    t.prompt("go")
    t.reply("", refused)
    for i in range(7):
        t.reply("", bash(f"make step{i}", "ok"))
    t.end()
    store = await _store(tmp_path, t.entries)
    assert tool_results(await store.load(KEY))[refused.id]["content"] == refused.output  # type: ignore[arg-type]


def test_expire_method_works_on_a_plain_list(tmp_path: Path) -> None:
    t, uses = _session()
    store = TrimmingSessionStore(tmp_path / "s.db", tmp_path, ephemeral=EphemeralPolicy(keep_recent=0))
    out = store.expire(t.entries)
    assert tool_results(out)[uses["ls_recent"].id]["content"] == "[ls -la 的结果已过期(第 1 轮前),当前状态可能已变。需要请重新执行]"
    assert store.last_report == {"expired": 2}  # status and ls; cat (5000) is above max_chars


# -- the report -------------------------------------------------------------------


async def test_disabled_policies_return_rows_verbatim(tmp_path: Path) -> None:
    t, _ = _session()
    store = await _store(tmp_path, t.entries, policy=TrimPolicy(enabled=False), ephemeral=EphemeralPolicy(enabled=False))
    assert await store.load(KEY) == t.entries  # type: ignore[arg-type]
    assert store.last_report == {}
    assert trim_report(store) == "未裁剪"


async def test_report_three_outputs(tmp_path: Path) -> None:
    t, _ = _session()
    store = await _store(tmp_path, t.entries, policy=TrimPolicy(keep_recent=3))
    await store.load(KEY)  # type: ignore[arg-type]
    r = store.last_report
    assert r["expired"] == 1 and r["cleared"] == 2 and r["kept"] == 3 and r["chars_saved"] > 11000
    assert trim_report(store) == f"裁掉 2 个工具结果(保留最近 3 个),省下 ~{r['chars_saved'] // 4} tokens"

    store.policy = TrimPolicy(keep_recent=50)  # nothing old enough to spill; expiry still acts
    await store.load(KEY)  # type: ignore[arg-type]
    assert trim_report(store) == "1 个时效性结果标记为过期"

    store.ephemeral = EphemeralPolicy(keep_recent=50)
    await store.load(KEY)  # type: ignore[arg-type]
    assert store.last_report == {"expired": 0, "cleared": 0, "kept": 10, "chars_saved": 0}
    assert trim_report(store) == "未裁剪"

    assert trim_report({"cleared": 4, "kept": 20, "chars_saved": 4003}) == "裁掉 4 个工具结果(保留最近 20 个),省下 ~1000 tokens"
    assert await store.load({"project_key": "p", "session_id": "missing"}) is None  # type: ignore[arg-type]
    assert store.last_report == {}


def test_spill_dir_must_stay_inside_workspace(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="inside the workspace"):
        TrimmingSessionStore(tmp_path / "s.db", tmp_path, TrimPolicy(spill_dirname="/tmp/elsewhere"))
    with pytest.raises(ValueError, match="inside the workspace"):
        TrimmingSessionStore(tmp_path / "s.db", tmp_path, TrimPolicy(spill_dirname="../out"))


def test_policy_defaults() -> None:
    p = TrimPolicy()
    assert (p.keep_recent, p.min_chars, p.spill_dirname, p.enabled) == (20, 2000, ".flower/spill", True)
    assert p.placeholder("/w/.flower/spill/ab.txt", 8400) == (
        "[这段工具结果共 8400 字符,已转存到 /w/.flower/spill/ab.txt,需要时用 Read 读取全文]")
