"""Guards called in-process with hook inputs shaped like the bundled CLI's."""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import threading
from pathlib import Path
from typing import Any

import pytest
from claude_agent_sdk import AgentDefinition, HookMatcher

from flower.core import audit
from flower.core.guard import (
    BULKY,
    HANDS_ON,
    WRITE_ONLY,
    _is_main_thread,
    delegate_guard,
    foreground_guard,
    index_guard,
    isolate_guard,
    isolated,
    isolation_check,
    merge_hooks,
    spill_guard,
    wants_isolation,
    whitelist_guard,
    workbench_hooks,
)
from flower.core.workbench import Workbench

SESSION = "0b7c3764-aaaa-bbbb-cccc-018daa45b3de"


def pre(tool: str, inp: dict[str, Any], *, agent: str | None = None, cwd: str = "/repo",
        agent_type: str | None = None) -> dict[str, Any]:
    data: dict[str, Any] = {"session_id": SESSION, "transcript_path": "/tmp/t.jsonl", "cwd": cwd,
                            "permission_mode": "acceptEdits", "hook_event_name": "PreToolUse",
                            "tool_name": tool, "tool_input": inp, "tool_use_id": "toolu_1"}
    if agent:
        data["agent_id"] = agent
        data["agent_type"] = agent_type or "coder"
    return data


def post(tool: str, inp: dict[str, Any], response: Any, *, agent: str | None = None,
         cwd: str = "/repo") -> dict[str, Any]:
    data = pre(tool, inp, agent=agent, cwd=cwd)
    data.update(hook_event_name="PostToolUse", tool_response=response)
    return data


def fire(matcher: HookMatcher, data: dict[str, Any]) -> dict[str, Any]:
    assert len(matcher.hooks) == 1
    return asyncio.run(matcher.hooks[0](data, data.get("tool_use_id"), {"signal": None}))


def decision(out: dict[str, Any]) -> str | None:
    return (out.get("hookSpecificOutput") or {}).get("permissionDecision")


def reason(out: dict[str, Any]) -> str:
    return out["hookSpecificOutput"]["permissionDecisionReason"]


@pytest.fixture
def events():
    seen: list[audit.AuditEvent] = []
    with audit.listen(seen.append):
        yield seen


def test_constants_and_main_thread():
    assert HANDS_ON == "Bash|Write|Edit|NotebookEdit"
    assert WRITE_ONLY == "Write|Edit|NotebookEdit"
    assert BULKY == "Bash|Read|Grep|Glob|WebFetch|WebSearch"
    assert _is_main_thread({"tool_name": "Bash"})
    assert _is_main_thread({"agent_id": ""})
    assert not _is_main_thread({"agent_id": "a5b62b41ffa530254"})


# -- whitelist_guard ---------------------------------------------------------

def test_whitelist_bans_what_is_not_allowed_on_the_main_thread_only(events):
    m = whitelist_guard(["mcp__human", "Read", "Glob", "Grep"], role="判定者")
    assert m is not None and m.matcher == "Bash|Write|Edit|NotebookEdit"
    out = fire(m, pre("Write", {"file_path": "/repo/x", "content": "y"}))
    assert decision(out) == "deny"
    assert "判定者没有 Write" in reason(out) and "不是配置遗漏" in reason(out)
    assert fire(m, pre("Write", {"file_path": "/repo/x"}, agent="a1")) == {}
    (ev,) = events
    assert ev.kind == "deny" and ev.get("role") == "判定者" and ev.get("tool") == "Write"
    assert ev.get("session_id") == SESSION and ev.get("agent_id") is None and ev.get("reason") == reason(out)


def test_whitelist_derives_from_allowed_tools():
    assert whitelist_guard(["Read", "Bash"]).matcher == "Write|Edit|NotebookEdit"  # judge(can_run=True)
    assert whitelist_guard(["Read", "Bash(git:*)"]).matcher == "Write|Edit|NotebookEdit"
    assert whitelist_guard(["Bash", "Write", "Edit", "NotebookEdit"]) is None
    assert whitelist_guard(None).matcher == "Bash|Write|Edit|NotebookEdit"
    assert "这个角色没有 Bash" in reason(fire(whitelist_guard([]), pre("Bash", {"command": "ls"})))


# -- delegate_guard ----------------------------------------------------------

def test_delegate_denies_hands_on_main_thread_with_the_way_forward(events):
    m = delegate_guard()
    assert m.matcher == HANDS_ON
    for tool in ("Write", "Edit", "Bash", "NotebookEdit"):
        out = fire(m, pre(tool, {"command": "ls"} if tool == "Bash" else {"file_path": "/repo/a"}))
        assert decision(out) == "deny"
        assert "Agent 工具" in reason(out) and "artifacts/" in reason(out) and "验收标准" in reason(out)
    assert fire(m, pre("Bash", {"command": "rm -rf /"}, agent="a1")) == {}
    assert [e.get("tool") for e in events] == ["Write", "Edit", "Bash", "NotebookEdit"]
    assert all(e.get("role") == "coordinator" and e.get("guard") == "delegate" for e in events)


def test_delegate_glance_lets_exactly_the_ephemeral_commands_through():
    m = delegate_guard(allow_glance=True)
    assert fire(m, pre("Bash", {"command": "git status && git log -1"})) == {}
    assert fire(m, pre("Bash", {"command": "ls -la"})) == {}
    for cmd in ("rm -rf x", "ls > f", "git status; touch y", "sleep 9 &", "cat $(echo x)", ""):
        out = fire(m, pre("Bash", {"command": cmd}))
        assert decision(out) == "deny", cmd
        assert "只读" in reason(out)
    assert decision(fire(m, pre("Write", {"file_path": "/repo/a"}))) == "deny"
    assert decision(fire(delegate_guard(), pre("Bash", {"command": "ls"}))) == "deny"


def test_delegate_custom_matcher():
    assert delegate_guard(tools=WRITE_ONLY).matcher == WRITE_ONLY


# -- spill_guard -------------------------------------------------------------

def bash_response(stdout: str) -> dict[str, Any]:
    return {"stdout": stdout, "stderr": "", "interrupted": False, "isImage": False, "noOutputExpected": False}


def test_spill_replaces_long_string_fields_and_keeps_the_shape(tmp_path: Path, events):
    wb = Workbench(tmp_path)
    m = spill_guard(wb)
    assert m.matcher == BULKY
    text = "".join(f"{i:049d}\n" for i in range(200))
    out = fire(m, post("Bash", {"command": "x"}, bash_response(text), cwd=str(tmp_path)))
    updated = out["hookSpecificOutput"]["updatedToolOutput"]
    assert out["hookSpecificOutput"]["hookEventName"] == "PostToolUse"
    assert set(updated) == set(bash_response(""))
    assert updated["interrupted"] is False and updated["stderr"] == ""
    digest = hashlib.sha256(text.encode()).hexdigest()[:16]
    path = tmp_path / ".flower" / "spill" / f"{digest}.txt"
    assert path.read_text() == text
    pointer, head = updated["stdout"].split("\n", 1)
    assert ".flower/spill/" + digest + ".txt" in pointer and "10000" in pointer and "Read" in pointer
    assert head == text[:400]
    (ev,) = events
    assert ev.kind == "spill" and ev.get("path") == str(path) and ev.get("size") == 10000
    assert ev.get("tool") == "Bash" and ev.get("session_id") == SESSION and ev.get("role") == "main"


def test_spill_leaves_short_results_lists_and_odd_shapes_alone(tmp_path: Path):
    m = spill_guard(Workbench(tmp_path), threshold=100)
    assert fire(m, post("Bash", {}, bash_response("short"))) == {}
    long_list = {"filenames": ["x" * 500] * 3, "numFiles": 3}
    assert fire(m, post("Glob", {}, long_list)) == {}
    assert fire(m, post("Bash", {}, "y" * 500)) == {}  # not a dict: never reshaped
    assert fire(m, post("Bash", {}, ["y" * 500])) == {}
    assert fire(m, post("Bash", {}, {**bash_response("z" * 500), "isImage": True})) == {}
    image = {"type": "image", "file": {"base64": "A" * 500, "type": "image/png"}}
    assert fire(m, post("Read", {"file_path": "/repo/a.png"}, image)) == {}
    assert not (tmp_path / ".flower" / "spill").exists()


def test_spill_reaches_nested_dicts_like_read(tmp_path: Path):
    m = spill_guard(Workbench(tmp_path), threshold=100)
    response = {"type": "text", "file": {"filePath": "/repo/big.txt", "content": "c" * 300, "numLines": 1,
                                         "startLine": 1, "totalLines": 1}}
    out = fire(m, post("Read", {"file_path": "/repo/big.txt"}, response))
    updated = out["hookSpecificOutput"]["updatedToolOutput"]
    assert updated["type"] == "text" and updated["file"]["numLines"] == 1
    assert updated["file"]["content"].startswith("[输出共 300 字")
    assert response["file"]["content"] == "c" * 300  # the input is not mutated


def test_reading_a_spill_file_passes_untouched(tmp_path: Path):
    wb = Workbench(tmp_path)
    m = spill_guard(wb, threshold=100)
    fire(m, post("Bash", {}, bash_response("q" * 300), cwd=str(tmp_path)))
    (spilled,) = (wb.root / "spill").iterdir()
    read = {"type": "text", "file": {"filePath": str(spilled), "content": "q" * 300}}
    assert fire(m, post("Read", {"file_path": str(spilled)}, read, cwd=str(tmp_path))) == {}
    rel = str(spilled.relative_to(tmp_path))
    assert fire(m, post("Read", {"file_path": rel}, read, cwd=str(tmp_path))) == {}
    assert fire(m, post("Bash", {"command": f"cat {rel}"}, bash_response("q" * 300), cwd=str(tmp_path))) == {}
    assert fire(m, post("Grep", {"pattern": "q", "path": str(spilled.parent)}, {"content": "q" * 300})) == {}
    other = {"type": "text", "file": {"filePath": str(tmp_path / "x"), "content": "q" * 300}}
    assert fire(m, post("Read", {"file_path": str(tmp_path / "x")}, other, cwd=str(tmp_path))) != {}


def test_spill_main_only_and_external_workbench(tmp_path: Path):
    home = tmp_path / "outside"
    wb = Workbench(tmp_path / "ws", home=home)
    assert fire(spill_guard(wb, threshold=10, main_only=True), post("Bash", {}, bash_response("w" * 50), agent="a1")) == {}
    out = fire(spill_guard(wb, threshold=10), post("Bash", {}, bash_response("w" * 50), agent="a1"))
    pointer = out["hookSpecificOutput"]["updatedToolOutput"]["stdout"].split("\n")[0]
    assert str(home / "spill") in pointer  # outside the workspace: absolute


def test_spill_same_text_twice_is_one_file(tmp_path: Path):
    m = spill_guard(Workbench(tmp_path), threshold=10)
    a = fire(m, post("Bash", {}, bash_response("r" * 50)))
    b = fire(m, post("Bash", {}, bash_response("r" * 50)))
    assert a == b and len(list((tmp_path / ".flower" / "spill").iterdir())) == 1


# -- index_guard -------------------------------------------------------------

def test_index_refreshes_on_writes_into_the_workbench(tmp_path: Path):
    wb = Workbench(tmp_path)
    m = index_guard(wb)
    assert m.matcher == "Write|Edit"
    script = wb.scripts / "build.sh"
    script.parent.mkdir(parents=True)
    script.write_text("#!/bin/sh\n# desc: 构建并打包\nmake\n")
    assert fire(m, post("Write", {"file_path": str(tmp_path / "src.py")}, {}, cwd=str(tmp_path))) == {}
    assert not wb.index_path.exists()
    assert fire(m, post("Write", {"file_path": ".flower/scripts/build.sh"}, {}, cwd=str(tmp_path))) == {}
    assert "构建并打包" in wb.index_path.read_text()


# -- isolation -----------------------------------------------------------------

def test_isolated_mark_is_python_side_only():
    a = AgentDefinition("写代码", "你写代码", tools=["Read"])
    assert not wants_isolation(a) and not wants_isolation(None)
    assert isolated(a) is a and wants_isolation(a)
    assert "_flower_isolate" not in dataclasses.asdict(a)
    assert not wants_isolation(dataclasses.replace(a))  # the documented price
    assert not wants_isolation(isolated(a, False))


def agent_call(role: str, **extra: Any) -> dict[str, Any]:
    return {"description": "实现", "prompt": "做", "subagent_type": role, **extra}


def test_isolate_injects_only_for_marked_roles(events):
    injected: list[tuple[str, str]] = []
    agents = {"coder": isolated(AgentDefinition("c", "p")), "reader": AgentDefinition("r", "p")}
    m = isolate_guard(agents, on_inject=lambda role, desc: injected.append((role, desc)))
    assert m.matcher == "Agent"
    out = fire(m, pre("Agent", agent_call("coder", run_in_background=False)))
    assert decision(out) == "allow"
    assert out["hookSpecificOutput"]["updatedInput"] == agent_call("coder", run_in_background=False,
                                                                   isolation="worktree")
    assert injected == [("coder", "实现")]
    assert fire(m, pre("Agent", agent_call("reader"))) == {}
    assert fire(m, pre("Agent", agent_call("coder", cwd="/elsewhere"))) == {}
    assert fire(m, pre("Agent", agent_call("coder", isolation="worktree"))) == {}
    assert fire(m, pre("Agent", agent_call("nobody"))) == {}
    assert [(e.kind, e.get("role")) for e in events] == [("isolate", "coder")]


def test_isolate_survives_a_failing_callback():
    def boom(role: str, desc: str) -> None:
        raise RuntimeError("listener bug")

    m = isolate_guard({"coder": isolated(AgentDefinition("c", "p"))}, on_inject=boom)
    assert decision(fire(m, pre("Agent", agent_call("coder")))) == "allow"


def test_isolation_check_fails_loudly_when_the_worktree_did_not_happen(events):
    agents = {"coder": isolated(AgentDefinition("c", "p"))}
    fire(isolate_guard(agents), pre("Agent", agent_call("coder"), cwd="/repo"))
    check = isolation_check()
    assert check.matcher == HANDS_ON
    wt = "/repo/.claude/worktrees/agent-a1"
    assert fire(check, pre("Write", {"file_path": f"{wt}/x"}, agent="a1", cwd=wt)) == {}
    out = fire(check, pre("Write", {"file_path": "/repo/x"}, agent="a1", cwd="/repo"))
    assert decision(out) == "deny" and "隔离失败" in reason(out) and "coder" in reason(out)
    assert fire(check, pre("Write", {"file_path": "/repo/x"}, cwd="/repo")) == {}  # main thread
    assert fire(check, pre("Write", {}, agent="a2", cwd="/repo", agent_type="reader")) == {}
    assert events[-1].kind == "deny" and events[-1].get("guard") == "isolation"


# -- foreground_guard ----------------------------------------------------------

def test_foreground_rewrites_background_dispatch_of_the_main_thread():
    m = foreground_guard({"reader": AgentDefinition("r", "p")})
    assert m.matcher == "Agent"
    for call in (agent_call("reader"), agent_call("reader", run_in_background=True)):
        out = fire(m, pre("Agent", call))
        assert decision(out) == "allow"
        assert out["hookSpecificOutput"]["updatedInput"] == {**call, "run_in_background": False}
    assert fire(m, pre("Agent", agent_call("reader", run_in_background=False))) == {}
    assert fire(m, pre("Agent", agent_call("reader"), agent="a1")) == {}  # a subagent's own dispatch


def test_an_isolated_dispatch_is_allowed_isolated_and_in_the_foreground(tmp_path: Path, events):
    """The reference: isolate_guard allows with updatedInput. No deny for a missing run_in_background."""
    agents = {"coder": isolated(AgentDefinition("c", "p"))}
    assert fire(foreground_guard(agents), pre("Agent", agent_call("coder"))) == {}  # left to isolate_guard
    out = fire(isolate_guard(agents, foreground=True), pre("Agent", agent_call("coder")))
    assert decision(out) == "allow"
    assert out["hookSpecificOutput"]["updatedInput"] == agent_call("coder", isolation="worktree",
                                                                   run_in_background=False)
    # assembled as Runtime mounts a coordinator: exactly one rewrite of the call, carrying both fields
    pre_hooks = workbench_hooks(Workbench(tmp_path), agents=agents)["PreToolUse"]
    answers = [fire(m, pre("Agent", agent_call("coder"))) for m in pre_hooks if m.matcher == "Agent"]
    rewrites = [a["hookSpecificOutput"]["updatedInput"] for a in answers if a]
    assert rewrites == [agent_call("coder", isolation="worktree", run_in_background=False)]
    assert not any(e.kind == "deny" for e in events)
    # the model's own cwd means no isolation injection: foreground_guard rewrites it
    out = fire(foreground_guard(agents), pre("Agent", agent_call("coder", cwd="/x")))
    assert out["hookSpecificOutput"]["updatedInput"]["run_in_background"] is False
    # without foreground, isolate_guard leaves run_in_background alone; a subagent's call never gets it
    out = fire(isolate_guard(agents), pre("Agent", agent_call("coder")))
    assert "run_in_background" not in out["hookSpecificOutput"]["updatedInput"]
    out = fire(isolate_guard(agents, foreground=True), pre("Agent", agent_call("coder"), agent="a1"))
    assert "run_in_background" not in out["hookSpecificOutput"]["updatedInput"]


# -- assembly ------------------------------------------------------------------

def test_workbench_hooks_assembly(tmp_path: Path):
    wb = Workbench(tmp_path)
    h = workbench_hooks(wb)
    assert [m.matcher for m in h["PreToolUse"]] == [HANDS_ON, "Agent"]
    assert [m.matcher for m in h["PostToolUse"]] == ["Write|Edit", BULKY]
    h = workbench_hooks(wb, delegate_only=False, spill_threshold=None)
    assert h == {"PostToolUse": h["PostToolUse"]} and len(h["PostToolUse"]) == 1
    agents = {"coder": isolated(AgentDefinition("c", "p")), "r": AgentDefinition("r", "p")}
    h = workbench_hooks(wb, delegate_only=False, agents=agents)
    assert [m.matcher for m in h["PreToolUse"]] == ["Agent", HANDS_ON]
    assert workbench_hooks(wb, delegate_only=False, agents={"r": AgentDefinition("r", "p")}).get("PreToolUse") is None


def test_workbench_hooks_glance_and_threshold(tmp_path: Path):
    h = workbench_hooks(Workbench(tmp_path), allow_glance=True, spill_threshold=50)
    assert fire(h["PreToolUse"][0], pre("Bash", {"command": "git status"})) == {}
    assert fire(h["PostToolUse"][1], post("Bash", {}, bash_response("s" * 60))) != {}


def test_walls_fail_closed_and_side_effects_do_not(tmp_path: Path):
    wb = Workbench(tmp_path)
    assert whitelist_guard([]).on_failure == "block"
    assert delegate_guard().on_failure == "block"
    assert isolate_guard({}).on_failure == "block"
    assert spill_guard(wb).on_failure is None and index_guard(wb).on_failure is None


def test_merge_hooks_concatenates_without_dedup():
    a, b = HookMatcher("Bash"), HookMatcher("Write")
    merged = merge_hooks({"PreToolUse": [a]}, None, {"PreToolUse": [a, b], "PostToolUse": [b]}, {})
    assert merged == {"PreToolUse": [a, a, b], "PostToolUse": [b]}
    assert merge_hooks() == {}


# -- audit -------------------------------------------------------------------

def test_a_failing_listener_never_breaks_a_hook(events):
    def broken(event: audit.AuditEvent) -> None:
        raise ValueError("listener bug")

    audit.add_listener(broken)
    try:
        out = fire(delegate_guard(), pre("Write", {"file_path": "/repo/a"}))
    finally:
        audit.remove_listener(broken)
    assert decision(out) == "deny" and len(events) == 1


def test_listen_is_scoped_and_thread_safe():
    seen: list[str] = []
    with audit.listen(lambda e: seen.append(e.kind)):
        threads = [threading.Thread(target=lambda: [audit.emit("spill", size=1) for _ in range(200)])
                   for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    audit.emit("deny")
    assert len(seen) == 1600
    ev = audit.emit("deny", role="x")
    assert ev.as_dict()["role"] == "x" and ev.as_dict()["kind"] == "deny"
