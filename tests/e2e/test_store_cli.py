"""The session store through the real CLI: write a session, resume it trimmed / pruned / healed.

A session is written to SQLite turn by turn through the real bundled CLI (the SDK mirrors
the transcript into ``session_store``), then resumed from a copy of the file with and
without reshaping. The CLI must accept the reshaped transcript, the scripted model must
answer the resumed turn, and the recorded request shows what the model was sent. The
markers pruning relies on (``toolDenialKind``, ``permissionDecision``, ``isApiErrorMessage``)
are the ones this CLI writes — each test makes it write them for real.
"""

from __future__ import annotations

import asyncio
import json
import re
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from claude_agent_sdk import (
    AssistantMessage,
    ClaudeAgentOptions,
    ClaudeSDKClient,
    HookMatcher,
    ResultMessage,
    SystemMessage,
    TextBlock,
    ToolResultBlock,
    UserMessage,
)

from flower.store import (
    EphemeralPolicy,
    PrunePolicy,
    PruningSessionStore,
    SqliteSessionStore,
    TrimmingSessionStore,
    TrimPolicy,
    trim_report,
)
from flower.testing import Request, Rule, ScriptedModel, call, calls, fail, say, tool

pytestmark = pytest.mark.cli

MARK = re.compile(r"【(T\d)】")
DENY_REASON = "协调者不能删文件:派一个工人去做"
INTERRUPT = PrunePolicy().interrupt_text
ORPHAN = PrunePolicy().orphan_text


def _latest_mark(req: Request) -> str | None:
    """The marker of the newest prompt in the conversation (tool results carry none)."""
    for m in reversed(req.messages):
        if m.get("role") != "user":
            continue
        content = m.get("content")
        texts = [content] if isinstance(content, str) else [
            b.get("text", "") for b in content or [] if isinstance(b, dict) and b.get("type") == "text"]
        for t in reversed(texts):
            found = MARK.findall(t)
            if found:
                return found[-1]
    return None


def turn(mark: str, *answers: Any, repeat: bool = False) -> Rule:
    return Rule(*answers, when=lambda r, m=mark: _latest_mark(r) == m, agent=False, repeat=repeat, name=mark)


def _options(ws: Path, store: Any, resume: str | None = None, **kw: Any) -> ClaudeAgentOptions:
    return ClaudeAgentOptions(cwd=str(ws), session_store=store, resume=resume, allowed_tools=["Bash", "Read"],
                              setting_sources=[], **kw)


async def _turn(model: ScriptedModel, prompt: str, opts: ClaudeAgentOptions) -> tuple[str, list[Request], str]:
    """Run one turn; return the session id, its conversation requests and the final text."""
    start = len(model.requests)
    msgs = await model.collect(prompt, opts)
    result = next(m for m in msgs if isinstance(m, ResultMessage))
    assert not result.is_error, result
    texts = [b.text for m in msgs if isinstance(m, AssistantMessage) for b in m.content if isinstance(b, TextBlock)]
    reqs = [r for r in model.conversation if r.n >= start]
    return result.session_id, reqs, texts[-1] if texts else ""


async def _stopped_turn(model: ScriptedModel, prompt: str, opts: ClaudeAgentOptions, *, how: str) -> str:
    """Run a turn the way it ends badly: ``interrupt`` (the SDK's interrupt while a tool runs),
    ``kill`` (the process goes away between a call and its result) or ``error`` (the API fails
    for good). For the first two the turn must call a slow and a quick tool at once: the stop
    comes when the quick one's result is in, so the slow one is surely running. Returns the
    session id."""
    sid = ""
    client = ClaudeSDKClient(model.apply(opts))
    await client.connect()
    try:
        await client.query(prompt)
        async for msg in client.receive_response():
            if isinstance(msg, SystemMessage) and msg.subtype == "init":
                sid = msg.data.get("session_id") or sid
            if isinstance(msg, UserMessage) and isinstance(msg.content, list) \
                    and any(isinstance(b, ToolResultBlock) for b in msg.content):
                if how == "interrupt":
                    await client.interrupt()
                elif how == "kill":
                    await asyncio.sleep(0.5)  # let the CLI hand over the transcript lines written so far
                    break
    except Exception:  # an error result raises (how == "error")
        if how != "error":
            raise
    finally:
        await client.disconnect()
    assert sid, "the CLI never reported a session id"
    return sid


def _body(req: Request) -> str:
    return json.dumps(req.body, ensure_ascii=False)


def _snapshot(db: Path, dest: Path) -> None:
    """Copy a live WAL database (a plain file copy would miss what is still in the -wal file)."""
    with sqlite3.connect(db) as src, sqlite3.connect(dest) as dst:
        src.backup(dst)


def _assert_paired(req: Request) -> None:
    """What the API demands: each tool_use is answered by a tool_result in the next user message."""
    msgs = req.messages
    for i, m in enumerate(msgs):
        if m.get("role") != "assistant" or not isinstance(m.get("content"), list):
            continue
        ids = [b["id"] for b in m["content"] if b.get("type") == "tool_use"]
        if not ids:
            continue
        nxt = msgs[i + 1] if i + 1 < len(msgs) else {}
        answered = [b.get("tool_use_id") for b in nxt.get("content") or [] if isinstance(b, dict)
                    and b.get("type") == "tool_result"]
        assert sorted(ids) == sorted(answered), f"tool_use {ids} answered by {answered}"


def _errors(req: Request) -> list[str]:
    out = []
    for m in req.messages:
        for b in m.get("content") or []:
            if isinstance(b, dict) and b.get("type") == "tool_result" and b.get("is_error"):
                c = b.get("content")
                out.append(c if isinstance(c, str) else str(c))
    return out


async def test_resume_trimmed_is_accepted_and_smaller(git_workspace: Path, tmp_path: Path, scripted) -> None:
    ws = git_workspace
    (ws / "big.txt").write_text("".join(f"row {i:05d} of a long data file\n" for i in range(400)))
    usage = {"input_tokens": 1234, "cache_read_input_tokens": 50_000, "cache_creation_input_tokens": 700}
    rules = [
        turn("T1", calls(call("Bash", {"command": "git status", "description": "look"}), text="先看看"),
             tool("Bash", {"command": "seq 1 4000", "description": "numbers"}),
             tool("Read", {"file_path": str(ws / "big.txt")}),
             say("T1 完成")),
        turn("T2", tool("Bash", {"command": "git status", "description": "look again"}), say("T2 完成")),
        turn("T3", tool("Bash", {"command": "touch t3.txt", "description": "mark"}), say("T3 完成", usage=usage)),
        turn("T4", say("resumed answer"), repeat=True),
    ]
    db = tmp_path / "sessions.db"
    with scripted(rules) as model:
        plain = SqliteSessionStore(db)
        sid, _, text = await _turn(model, "【T1】看看仓库和数据", _options(ws, plain))
        assert text == "T1 完成"
        for mark in ("T2", "T3"):
            assert (await _turn(model, f"【{mark}】继续", _options(ws, plain, resume=sid)))[0] == sid

        # the cheap synchronous lookups a Runtime makes, on the session the CLI wrote
        pk = _project_key(ws)
        assert plain.projects() == [pk]
        assert plain.has_session(pk, sid) and not plain.has_session(pk, "0" * 36)
        assert plain.last_context(pk, sid) == 1234 + 50_000 + 700  # the last turn's usage, as the CLI stored it

        # five tool results, oldest first: git status, seq, Read, git status, touch
        sizes: dict[str, int] = {}
        for label, make in (
            ("off", lambda p: SqliteSessionStore(p)),
            ("on", lambda p: TrimmingSessionStore(p, ws, TrimPolicy(keep_recent=1), EphemeralPolicy(keep_recent=1))),
        ):
            copy = tmp_path / f"resume-{label}.db"
            _snapshot(db, copy)
            store = make(copy)
            rsid, reqs, text = await _turn(model, "【T4】现在呢?", _options(ws, store, resume=sid))
            assert rsid == sid and text == "resumed answer", f"trim {label}: the resumed turn was not answered"
            first = reqs[0]
            _assert_paired(first)
            body = _body(first)
            assert "【T1】看看仓库和数据" in body and "T3 完成" in body, "history must survive the resume"
            sizes[label] = first.size
            if label == "on":
                report = store.last_report
                for age in (4, 1):  # T1's and T2's git status, by the tool results that came after them
                    assert f"[git status 的结果已过期(第 {age} 轮前)" in body
                assert body.count("已转存到") == 2 and "3999\\n4000" not in body  # seq output and Read spilled
                spilled = sorted((ws / ".flower" / "spill").glob("*.txt"))
                assert len(spilled) == 2 and any(p.read_text().rstrip().endswith("3999\n4000") for p in spilled)
                assert (report["expired"], report["cleared"], report["kept"]) == (2, 2, 1), report
                assert trim_report(store).startswith("裁掉 2 个工具结果(保留最近 1 个),省下 ~")
            else:
                assert "3999\\n4000" in body and "已过期" not in body

    # the original rows were never touched: a plain load still has the full outputs
    rows = await SqliteSessionStore(db).load({"project_key": _project_key(ws), "session_id": sid})
    assert rows and any("3999\\n4000" in json.dumps(r) for r in rows) and not any("已过期" in str(r) for r in rows)
    print(f"\nresume request: trimmed {sizes['on']} B vs untrimmed {sizes['off']} B "
          f"= {sizes['on'] / sizes['off']:.2f}x; {trim_report(store)}")
    assert sizes["on"] < sizes["off"]


async def test_pruned_denials_keep_newest_and_resume(git_workspace: Path, tmp_path: Path, scripted) -> None:
    ws = git_workspace

    async def deny_rm(inp: dict[str, Any], tool_use_id: str | None, ctx: Any) -> dict[str, Any]:
        if str(inp.get("tool_input", {}).get("command", "")).startswith("rm "):
            return {"hookSpecificOutput": {"hookEventName": "PreToolUse", "permissionDecision": "deny",
                                           "permissionDecisionReason": DENY_REASON}}
        return {}

    hooks = {"PreToolUse": [HookMatcher(matcher="Bash", hooks=[deny_rm])]}
    rules = [
        turn("T1",
             calls(call("Bash", {"command": "rm -f a.txt"}), call("Bash", {"command": "ls"}), text="清理"),
             tool("Bash", {"command": "rm -f b.txt"}),
             tool("Write", {"file_path": str(ws / "w.txt"), "content": "x"}),  # not allowed, nobody to approve
             tool("Bash", {"command": "false"}),  # a plain failure: information, not a denial
             tool("Bash", {"command": "rm -f c.txt"}),
             say("删不掉,放弃")),
        turn("T2", say("resumed after pruning"), repeat=True),
    ]
    db = tmp_path / "sessions.db"
    with scripted(rules) as model:
        opts = _options(ws, SqliteSessionStore(db), hooks=hooks)
        sid, reqs, _ = await _turn(model, "【T1】清理临时文件", opts)
        errors = _errors(reqs[-1])
        assert len([e for e in errors if DENY_REASON in e]) == 3, f"expected three hook denials, saw {errors}"
        assert any("haven't granted it yet" in e for e in errors) and any("Exit code 1" in e for e in errors)
        # the markers pruning relies on, as this CLI writes them
        rows = await SqliteSessionStore(db).load({"project_key": _project_key(ws), "session_id": sid})
        marks = {(r.get("toolDenialKind"), (r.get("permissionDecision") or {}).get("decision"))
                 for r in rows or [] if r.get("type") == "user" and isinstance(r["message"]["content"], list)}
        assert {("permission-rule", "reject"), ("user-rejected", "reject"), (None, "accept")} <= marks, marks

        seen: dict[int, Request] = {}
        for keep in (0, 1, 4):
            copy = tmp_path / f"prune-{keep}.db"
            _snapshot(db, copy)
            store = PruningSessionStore(copy, ws, prune=PrunePolicy(keep_denials=keep))
            rsid, reqs, text = await _turn(model, "【T2】继续", _options(ws, store, resume=sid, hooks=hooks))
            assert rsid == sid and text == "resumed after pruning"
            _assert_paired(reqs[0])
            seen[keep] = reqs[0]
            assert store.denials_dropped == 4 - keep and store.pruned == 2 * (4 - keep)

    kept = [e for e in _errors(seen[1]) if DENY_REASON in e]
    assert len(kept) == 1, _errors(seen[1])
    body = str(seen[1].body)
    assert "rm -f c.txt" in body and "rm -f a.txt" not in body and "rm -f b.txt" not in body
    assert "w.txt" not in body, "the older refusal of another kind went too"
    assert "'command': 'ls'" in body, "the parallel sibling of a pruned call stays"
    assert len([e for e in _errors(seen[4]) if DENY_REASON in e]) == 3
    assert _errors(seen[0]) == ["Exit code 1"] and "rm -f" not in str(seen[0].body)


async def test_interrupt_residue_and_api_errors_on_resume(git_workspace: Path, tmp_path: Path, scripted) -> None:
    """An interrupt while a tool runs leaves "STOP … wait for the user" in the transcript; a failed
    API call leaves a synthetic error message. Resumed through the pruning store, neither is replayed."""
    ws = git_workspace
    rules = [
        turn("T1", calls(call("Bash", {"command": "sleep 8"}), call("Bash", {"command": "echo two"}), text="开工")),
        turn("T2", fail(500), repeat=True),
        turn("T3", say("resumed cleanly"), repeat=True),
    ]
    db = tmp_path / "sessions.db"
    with scripted(rules) as model:
        plain = SqliteSessionStore(db)
        sid = await _stopped_turn(model, "【T1】跑一下", _options(ws, plain), how="interrupt")
        assert await _stopped_turn(model, "【T2】继续", _options(ws, plain, resume=sid), how="error") == sid
        rows = await plain.load({"project_key": _project_key(ws), "session_id": sid})
        assert any(r.get("toolDenialKind") == "user-rejected" and "permissionDecision" not in r for r in rows or [])
        assert any(r.get("isApiErrorMessage") is True for r in rows or [])

        bodies: dict[str, str] = {}
        for label in ("plain", "pruned"):
            copy = tmp_path / f"{label}.db"
            _snapshot(db, copy)
            store = SqliteSessionStore(copy) if label == "plain" else PruningSessionStore(copy, ws)
            rsid, reqs, text = await _turn(model, "【T3】接着来", _options(ws, store, resume=sid))
            assert rsid == sid and text == "resumed cleanly"
            _assert_paired(reqs[0])
            bodies[label] = _body(reqs[0])
        assert (store.interrupts_neutralized, store.api_errors_dropped) == (1, 1)

    assert "STOP what you are doing" in bodies["plain"], "the CLI's interrupt text reaches the model unpruned"
    assert "STOP what you are doing" not in bodies["pruned"] and INTERRUPT in bodies["pruned"]
    assert "echo two" in bodies["pruned"] and '"two"' in bodies["pruned"], "the finished sibling call stays"
    # this CLI already leaves its own API error messages out of requests; the store drops them for any CLI
    assert "API Error" not in bodies["pruned"]


async def test_orphan_call_is_healed_on_resume(git_workspace: Path, tmp_path: Path, scripted) -> None:
    """The process goes away between a call and its result: the resumed request still pairs every call."""
    ws = git_workspace
    rules = [
        turn("T1", calls(call("Bash", {"command": "sleep 8"}), call("Bash", {"command": "echo two"}), text="开工")),
        turn("T2", say("resumed after the crash"), repeat=True),
    ]
    db = tmp_path / "sessions.db"
    key: dict[str, str] = {}
    with scripted(rules) as model:
        sid = await _stopped_turn(model, "【T1】跑一下", _options(ws, SqliteSessionStore(db)), how="kill")
        key = {"project_key": _project_key(ws), "session_id": sid}
        rows = await SqliteSessionStore(db).load(key)  # type: ignore[arg-type]
        answered = {b.get("tool_use_id") for r in rows or [] if r.get("type") == "user"
                    for b in r["message"]["content"] if isinstance(b, dict)}
        called = {b["id"]: b["input"]["command"] for r in rows or [] if r.get("type") == "assistant"
                  for b in r["message"]["content"] if b.get("type") == "tool_use"}
        orphans = [c for i, c in called.items() if i not in answered]
        assert orphans == ["sleep 8"], f"the stopped turn must leave exactly the running call unanswered: {called}"

        bodies: dict[str, str] = {}
        for label, prune in (("healed", PrunePolicy()), ("unhealed", PrunePolicy(heal_orphans=False))):
            copy = tmp_path / f"{label}.db"
            _snapshot(db, copy)
            store = PruningSessionStore(copy, ws, prune=prune)
            rsid, reqs, text = await _turn(model, "【T2】继续", _options(ws, store, resume=sid))
            assert rsid == sid and text == "resumed after the crash"
            _assert_paired(reqs[0])
            bodies[label] = _body(reqs[0])
            assert store.orphans_healed == (1 if label == "healed" else 0)

        assert ORPHAN in bodies["healed"] and "[Tool call interrupted" not in bodies["healed"]
        # without our healing this CLI fills the gap itself, writes its stand-in with toolDenialKind
        # "interrupted" — and the next load through the store neutralizes that residue
        assert "[Tool call interrupted" in bodies["unhealed"] and ORPHAN not in bodies["unhealed"]
        after = PruningSessionStore(tmp_path / "unhealed.db", ws)
        rows = await after.load(key)  # type: ignore[arg-type]
        assert after.interrupts_neutralized == 1 and after.orphans_healed == 0
        assert INTERRUPT in json.dumps(rows, ensure_ascii=False)


def _project_key(ws: Path) -> str:
    from claude_agent_sdk import project_key_for_directory

    return project_key_for_directory(str(ws))
