"""The hook layer through the real bundled CLI, driven by the scripted model.

Each test mounts the guards the way Runtime does (spec → whitelist_guard or
workbench_hooks) and checks what the CLI actually did: files on disk, tool
results the model saw, the system text it was sent, audit events emitted.
"""

from __future__ import annotations

import dataclasses
import json
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
from claude_agent_sdk import (
    ClaudeSDKClient,
    HookMatcher,
    ResultMessage,
    TaskNotificationMessage,
)

from flower.core import audit
from flower.core.agent import AgentSpec, build_options
from flower.core.guard import (
    isolate_guard,
    isolated,
    isolation_check,
    merge_hooks,
    whitelist_guard,
    workbench_hooks,
)
from flower.core.channel import HumanChannel
from flower.core.roles import clarify, coordinator, judge, worker
from flower.core.workbench import Workbench
from flower.testing import Request, Rule, ScriptedModel, call, calls, say, tool

pytestmark = pytest.mark.cli

# What the CLI says when a tool needed an approval nobody gave.
UNAPPROVED = ("haven't granted", "requires approval", "requested permission")


def Channel() -> HumanChannel:
    """The real channel; nobody answers (timeout_s=0), so an ask never blocks a test."""
    return HumanChannel(timeout_s=0)


def mount(spec: AgentSpec, ws: Path, wb: Workbench | None = None, **kw: Any) -> Any:
    """SDK options with the guards Runtime mounts for `spec` (see Runtime.options)."""
    wall = None if spec.delegate_only else whitelist_guard(spec.allowed_tools, role=spec.name)
    hooks = merge_hooks(
        spec.hooks,
        workbench_hooks(wb, delegate_only=spec.delegate_only, agents=spec.agents, allow_glance=spec.glance)
        if wb else None,
        {"PreToolUse": [wall]} if wall else None,
    )
    options = build_options(spec, cwd=ws, prelude=wb.prompt_block() if wb else "", **kw)
    options.hooks = hooks or None
    return options


def tool_results(model: ScriptedModel) -> list[dict[str, Any]]:
    """Every tool result the model was shown, once each, tagged with who saw it."""
    return [{**r, "subagent": req.is_subagent} for req in model.conversation for r in req.results]


def assert_never_unapproved(model: ScriptedModel) -> None:
    for r in tool_results(model):
        assert not any(p in r["text"] for p in UNAPPROVED), r


@pytest.fixture
def events():
    seen: list[audit.AuditEvent] = []
    with audit.listen(seen.append):
        yield seen


def git(ws: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=ws, check=True, capture_output=True, text=True).stdout


# -- 1. the coordinator touches nothing; its worker needs nobody's approval -----

async def test_coordinator_is_walled_and_its_worker_is_not(workspace: Path, events):
    ws, wb = workspace, Workbench(workspace)
    (ws / "e.txt").write_text("old\n")
    spec = coordinator("协调者", "", {"coder": worker("写代码", "你写代码")})
    rules = [
        Rule(calls(call("Write", {"file_path": str(ws / "w.txt"), "content": "boss\n"}),
                   call("Edit", {"file_path": str(ws / "e.txt"), "old_string": "old", "new_string": "new"}),
                   call("Bash", {"command": "touch boss.txt", "description": "touch"})),
             prompt="把活干了", agent=False),
        Rule(tool("Agent", {"description": "写文件", "prompt": "请写 w.txt 并建 made.txt", "subagent_type": "coder"}),
             agent=False, result="Agent 工具"),
        Rule(tool("Bash", {"command": "touch made.txt && echo made", "description": "touch"}),
             agent=True, prompt="请写 w.txt"),
        Rule(tool("Write", {"file_path": str(ws / "w.txt"), "content": "worker\n"}), agent=True, result="made"),
        Rule(say("## 结论\n写好了"), agent=True, result="w.txt"),
        Rule(say("完成"), agent=False, result="写好了"),
    ]
    with ScriptedModel(rules) as model:
        msgs = await model.collect("把活干了", mount(spec, ws, wb))
    assert isinstance(msgs[-1], ResultMessage) and msgs[-1].result == "完成"
    main = [r for r in tool_results(model) if not r["subagent"]]
    denied = main[:3]
    assert all(r["is_error"] and "Agent 工具" in r["text"] for r in denied), denied
    assert (ws / "e.txt").read_text() == "old\n" and not (ws / "boss.txt").exists()
    assert (ws / "w.txt").read_text() == "worker\n" and (ws / "made.txt").exists()
    sub = [r for r in tool_results(model) if r["subagent"]]
    assert len(sub) == 2 and not any(r["is_error"] for r in sub)
    assert_never_unapproved(model)
    denies = [e for e in events if e.kind == "deny"]
    assert sorted(e.get("tool") for e in denies) == ["Bash", "Edit", "Write"]
    assert all(e.get("agent_id") is None and e.get("session_id") for e in denies)


# -- 2. a glance runs; anything that changes state does not --------------------

async def test_glance_runs_only_ephemeral_commands(git_workspace: Path):
    ws = git_workspace
    (ws / "x").mkdir()
    spec = coordinator("协调者", "", {"coder": worker("写代码", "你写代码")}, glance=True)
    rules = [
        Rule(calls(call("Bash", {"command": "git status && git log -1", "description": "看一眼"}),
                   call("Bash", {"command": "rm -rf x", "description": "删"}),
                   call("Bash", {"command": "ls > f", "description": "写"})), prompt="看看", agent=False),
        Rule(say("看过了"), agent=False),
    ]
    with ScriptedModel(rules) as model:
        await model.collect("看看仓库", mount(spec, ws, Workbench(ws)))
    glance, rm, redirect = tool_results(model)
    assert not glance["is_error"] and "init" in glance["text"] and "branch" in glance["text"].lower()
    assert rm["is_error"] and "只读" in rm["text"]
    assert redirect["is_error"] and "只读" in redirect["text"]
    assert (ws / "x").is_dir() and not (ws / "f").exists()


# -- 3. read-only roles stay read-only although allowed_tools only pre-approves --

@pytest.mark.parametrize("make,can_bash", [
    (lambda ch: judge("判定", ch), False),
    (lambda ch: clarify("确认需求", ch), False),
    (lambda ch: judge("判定", ch, can_run=True), True),
], ids=["judge", "clarify", "judge-can-run"])
async def test_read_only_roles(workspace: Path, make, can_bash: bool, events):
    ws = workspace
    # acceptEdits would let the CLI write without asking: only the guard stands in the way.
    spec = dataclasses.replace(make(Channel()), permission_mode="acceptEdits")
    rules = [
        Rule(calls(call("mcp__human__ask", {"question": "边界是什么?"}),
                   call("Write", {"file_path": str(ws / "w.txt"), "content": "x"}),
                   call("Bash", {"command": "touch ran.txt && echo ran", "description": "touch"})),
             prompt="开始", agent=False),
        Rule(say("## 结论\n无法验证"), agent=False),
    ]
    with ScriptedModel(rules) as model:
        await model.collect("开始", mount(spec, ws))
    ask, write, bash = tool_results(model)
    assert not ask["is_error"] and "没有人回答" in ask["text"]  # the real channel, nobody on duty
    assert write["is_error"] and f"{spec.name}没有 Write" in write["text"] and "不是配置遗漏" in write["text"]
    assert not (ws / "w.txt").exists()
    if can_bash:
        assert not bash["is_error"] and "ran" in bash["text"] and (ws / "ran.txt").exists()
    else:
        assert bash["is_error"] and f"{spec.name}没有 Bash" in bash["text"] and not (ws / "ran.txt").exists()
    assert {e.get("role") for e in events if e.kind == "deny"} == {spec.name}


# -- 4. spill: the pointer in context, the full text on disk, read back whole ----

SPILL_PATH = re.compile(r"已落盘到 (\S+?);")


def read_spilled(req: Request) -> Any:
    return tool("Read", {"file_path": SPILL_PATH.search(req.result_text).group(1)})


async def test_spill_pointer_file_and_unspilled_read(workspace: Path, events):
    ws, wb = workspace, Workbench(workspace, home=workspace.parent / "bench")  # external: absolute paths
    command = "seq -f '%049g' 1 200"
    expected = subprocess.run(command, shell=True, capture_output=True, text=True).stdout.rstrip("\n")
    spec = AgentSpec("t", "", allowed_tools=["Bash", "Read"])
    rules = [
        Rule(tool("Bash", {"command": command, "description": "长输出"}), prompt="跑", agent=False),
        Rule(read_spilled, agent=False, result="已落盘到"),
        Rule(say("读完了"), agent=False),
    ]
    with ScriptedModel(rules) as model:
        await model.collect("跑一下", mount(spec, ws, wb, add_dirs=[str(wb.root)]))
    bash, read = tool_results(model)
    pointer, head = bash["text"].split("\n", 1)
    assert len(bash["text"]) < 600 and str(len(expected)) in pointer
    assert head == expected[:400].rstrip()  # the CLI strips trailing whitespace off a result
    (spilled,) = (wb.root / "spill").iterdir()
    assert spilled.read_text() == expected and pointer.find(str(spilled)) > 0
    assert not read["is_error"] and "已落盘" not in read["text"]
    assert "0" * 46 + "200" in read["text"] and len(read["text"]) > len(expected)
    assert len(list((wb.root / "spill").iterdir())) == 1  # reading it did not spill it again
    (ev,) = [e for e in events if e.kind == "spill"]
    assert ev.get("path") == str(spilled) and ev.get("size") == len(expected) and ev.get("tool") == "Bash"


# -- 5. a write into the workbench reaches the next session's system text -------

async def test_index_reaches_the_next_session(workspace: Path):
    ws, wb = workspace, Workbench(workspace)
    script = wb.scripts / "build.sh"
    spec = AgentSpec("t", "", allowed_tools=["Write"], permission_mode="acceptEdits")
    rules = [
        Rule(tool("Write", {"file_path": str(script), "content": "#!/bin/sh\n# desc: 构建整个项目\nmake\n"}),
             prompt="第一次", agent=False),
        Rule(say("写好了"), agent=False, prompt="第一次"),
        Rule(say("我看到了 build.sh"), agent=False, prompt="第二次"),
    ]
    with ScriptedModel(rules) as model:
        await model.collect("第一次", mount(spec, ws, wb))
        assert "构建整个项目" in wb.index_path.read_text()
        await model.collect("第二次", mount(spec, ws, wb))  # prelude = wb.prompt_block(), as Runtime does
    first, second = model.sessions()
    system = {s: [r.system for r in model.conversation if r.session == s] for s in (first, second)}
    assert not any("构建整个项目" in t for t in system[first])
    assert all("构建整个项目" in t and ".flower/scripts/build.sh" in t for t in system[second])


# -- 6. isolation: a worktree per isolated worker, or a loud failure -----------

def isolated_team() -> AgentSpec:
    return coordinator("协调者", "", {"coder": worker("写代码", "你写代码", isolate=True)})


DISPATCH = {"description": "隔离地写", "prompt": "写 iso.txt", "subagent_type": "coder"}


async def test_isolated_worker_writes_in_its_own_worktree(git_workspace: Path, tmp_path: Path, events):
    ws = git_workspace
    wb = Workbench(ws, home=tmp_path / "bench")  # isolation needs the workbench out of the repo
    rules = [
        # no run_in_background (background by default): allowed, isolated and put in the foreground
        Rule(tool("Agent", DISPATCH), prompt="开工", agent=False),
        Rule(tool("Write", {"file_path": "iso.txt", "content": "isolated\n"}), agent=True, prompt="写 iso.txt"),
        Rule(tool("Bash", {"command": "pwd", "description": "where"}), agent=True, result="iso.txt"),
        Rule(say("## 结论\n写好了", delay=0.5), agent=True),
        Rule(say("完成:写好了"), agent=False, result="写好了"),
        Rule(say("已派出"), agent=False),
    ]
    with ScriptedModel(rules) as model:
        msgs = await model.collect("开工", mount(isolated_team(), ws, wb, add_dirs=[str(wb.root)]))
    results = tool_results(model)
    assert not results[0]["is_error"] and not any("Async agent launched" in r["text"] for r in results)
    assert isinstance(msgs[-1], ResultMessage) and msgs[-1].result == "完成:写好了"  # waited for the report
    assert not any(e.kind == "deny" for e in events)
    worktrees = [line.split(" ", 1)[1] for line in git(ws, "worktree", "list", "--porcelain").splitlines()
                 if line.startswith("worktree ")]
    assert not (ws / "iso.txt").exists(), "the bundled CLI ignored the injected isolation=worktree"
    others = [Path(w) for w in worktrees if Path(w) != ws]
    assert len(others) == 1, worktrees
    wt = others[0]
    assert (wt / "iso.txt").read_text() == "isolated\n"
    pwd = [r for r in results if r["subagent"]][-1]
    assert pwd["text"].strip() == str(wt)
    assert "iso.txt" not in git(ws, "status", "--porcelain")
    assert any(e.kind == "isolate" and e.get("role") == "coder" for e in events)
    assert_never_unapproved(model)


async def test_isolation_outside_git_fails_clearly(workspace: Path, tmp_path: Path):
    wb = Workbench(workspace, home=tmp_path / "bench")
    rules = [Rule(tool("Agent", {**DISPATCH, "run_in_background": False}), prompt="开工", agent=False),
             Rule(say("隔离不可用"), agent=False)]
    with ScriptedModel(rules) as model:
        await model.collect("开工", mount(isolated_team(), workspace, wb))
    (result,) = tool_results(model)
    assert result["is_error"] and "not in a git repository" in result["text"]
    assert not any(r.is_subagent for r in model.conversation)


async def test_ignored_isolation_is_denied_loudly(git_workspace: Path, events):
    """Simulates a CLI that drops the rewrite: the check must refuse to run in the shared checkout."""
    ws = git_workspace
    agents = {"coder": isolated(worker("写代码", "你写代码"))}
    real = isolate_guard(agents).hooks[0]

    async def dropped(data: Any, tool_use_id: str | None, context: Any) -> dict[str, Any]:
        await real(data, tool_use_id, context)  # records the injection...
        return {}  # ...which never reaches the CLI

    spec = AgentSpec("t", "", allowed_tools=["Agent"], permission_mode="acceptEdits", agents=agents,
                     hooks={"PreToolUse": [HookMatcher("Agent", [dropped]), isolation_check()]})
    rules = [Rule(tool("Agent", {**DISPATCH, "run_in_background": False}), prompt="开工", agent=False),
             Rule(tool("Write", {"file_path": "iso.txt", "content": "x"}), agent=True, prompt="写 iso.txt"),
             Rule(say("## 结论\n隔离失败"), agent=True),
             Rule(say("完成"), agent=False)]
    with ScriptedModel(rules) as model:
        await model.collect("开工", build_options(spec, cwd=ws))
    write = [r for r in tool_results(model) if r["subagent"]][0]
    assert write["is_error"] and "隔离失败" in write["text"]
    assert not (ws / "iso.txt").exists()
    assert any(e.kind == "deny" and e.get("guard") == "isolation" and e.get("agent_id") for e in events)


# -- 7. a worker's WebFetch is pre-approved through the coordinator ------------

@pytest.mark.parametrize("merged", [True, False], ids=["merged", "not-merged"])
async def test_worker_webfetch_without_permission_denial(workspace: Path, merged: bool):
    ws = workspace
    spec = coordinator("协调者", "", {"coder": worker("查资料", "你查资料")})
    assert "WebFetch" in spec.allowed_tools
    if not merged:  # what happened before the merge: the worker's fetch is refused, silently
        spec = dataclasses.replace(spec, allowed_tools=[t for t in spec.allowed_tools if t != "WebFetch"])
    rules = [
        Rule(tool("Agent", {"description": "查", "prompt": "去抓页面", "subagent_type": "coder"}),
             prompt="查", agent=False),
        Rule(tool("WebFetch", {"url": "http://127.0.0.1:9/flower", "prompt": "总结"}), agent=True, prompt="去抓页面"),
        Rule(say("## 结论\n抓不到"), agent=True),
        Rule(say("完成"), agent=False),
    ]
    options = mount(spec, ws, Workbench(ws))
    # The CLI's WebFetch preflight asks api.anthropic.com about the domain; nothing leaves 127.0.0.1 here.
    options.settings = json.dumps({"skipWebFetchPreflight": True})
    with ScriptedModel(rules) as model:
        await model.collect("查一下", options)
    (fetch,) = [r for r in tool_results(model) if r["subagent"]]
    if merged:
        assert not any(p in fetch["text"] for p in UNAPPROVED), fetch
        assert "127.0.0.1" in fetch["text"]  # the fetch itself ran (and failed offline)
    else:
        assert "haven't granted" in fetch["text"]


# -- 8. the coordinator answers only after its workers have reported ----------

@pytest.mark.parametrize("guarded", [True, False], ids=["guarded", "unguarded"])
async def test_coordinator_waits_for_the_report(workspace: Path, guarded: bool):
    ws, wb = workspace, Workbench(workspace)
    spec = coordinator("协调者", "", {"coder": worker("写代码", "你写代码")})
    rules = [
        Rule(tool("Agent", {"description": "干活", "prompt": "干活去", "subagent_type": "coder",
                            "run_in_background": True}), prompt="开工", agent=False),
        # unguarded, the worker answers long after the step ended (0.5 s was outrun once, by a step on a loaded
        # machine): nothing waits for it, the client is closed first
        Rule(say("## 结论\n报告:做完了", delay=0.5 if guarded else 5), agent=True),
        Rule(say("最终答复:做完了"), agent=False, result="报告:做完了"),
        Rule(say("已派出,等报告"), agent=False),
    ]
    options = mount(spec, ws, wb) if guarded else build_options(spec, cwd=ws)
    with ScriptedModel(rules) as model:
        async with ClaudeSDKClient(model.apply(options)) as client:
            await client.query("开工")
            msgs = [m async for m in client.receive_response()]  # how Runtime reads a step
            reported = any("报告:做完了" in r.result_text for r in model.conversation if not r.is_subagent)
    results = [m for m in msgs if isinstance(m, ResultMessage)]
    assert len(results) == 1
    if guarded:
        assert results[0].result == "最终答复:做完了" and reported
        assert not any("Async agent launched" in r["text"] for r in tool_results(model))
    else:  # the step ends at once, the worker still running: why foreground_guard exists
        assert results[0].result == "已派出,等报告" and not reported
        assert not any(isinstance(m, TaskNotificationMessage) for m in msgs)  # the worker had not finished
